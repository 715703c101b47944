/*
 * For the ThreadSanitizer run only (LD_PRELOAD): Debian's libuv closes its
 * descriptors with a raw syscall(SYS_close, fd), which TSan does not see,
 * so a descriptor number reused later by another thread looks like a race
 * on it. Routing that call through close(2) lets TSan see the close; no
 * report is suppressed.
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <sys/syscall.h>
#include <unistd.h>

long syscall(long n, ...);

long syscall(long n, ...)
{
	static long (*real)(long, ...);
	va_list ap;
	long a[6];

	va_start(ap, n);
	for (int i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	if (n == SYS_close)
		return close((int)a[0]);
	if (!real)
		real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
	return real(n, a[0], a[1], a[2], a[3], a[4], a[5]);
}
