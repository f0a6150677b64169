"""The freestanding runtime every generated program links: `_start`, and read/write/exit
through Linux system calls (``trap0(#1)``, number in r6) so qemu-hexagon serves stdin/stdout."""

RUNTIME_C = r"""
#include <hexagon_types.h>
#include <hexagon_protos.h>
typedef unsigned char u8;
typedef signed char i8;
typedef short i16;
typedef unsigned short u16;
typedef int i32;
typedef unsigned int u32;
typedef long long i64;

static long dnnr_syscall3(long number, long a, long b, long c) {
  register long r0 __asm__("r0") = a;
  register long r1 __asm__("r1") = b;
  register long r2 __asm__("r2") = c;
  register long r6 __asm__("r6") = number;
  __asm__ volatile("trap0(#1)" : "+r"(r0) : "r"(r1), "r"(r2), "r"(r6) : "memory");
  return r0;
}

/* Linux generic syscall numbers (asm-generic/unistd.h): read 63, write 64, exit 93. */
static void dnnr_read(void *buf, long n) {
  long done = 0;
  while (done < n) {
    long got = dnnr_syscall3(63, 0, (long)((char *)buf + done), n - done);
    if (got <= 0) break;
    done += got;
  }
}

static void dnnr_write(const void *buf, long n) {
  long done = 0;
  while (done < n) {
    long put = dnnr_syscall3(64, 1, (long)((const char *)buf + done), n - done);
    if (put <= 0) break;
    done += put;
  }
}

int main(void);

__attribute__((naked, noreturn)) void _start(void) {
  __asm__ volatile("call main\n r6 = #93\n trap0(#1)\n");
}
"""
