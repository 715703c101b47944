/*
 * The socket-path rule (design.md section 3). Pure: no environment reads,
 * no file system access; the caller creates and checks the directory.
 * A path that would not fit sockaddr_un.sun_path is an error, never
 * truncated.
 */
#include "protocol/sockpath.h"
#include "protocol/fnv.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

void sockpath_key(const char *root, char key[17])
{
	static const char hex[] = "0123456789abcdef";
	uint64_t h = fnv1a64(root, strlen(root));
	int i;

	for (i = 15; i >= 0; i--) {
		key[i] = hex[h & 0xf];
		h >>= 4;
	}
	key[16] = '\0';
}

int sockpath_resolve(const char *root, const char *vmem_socket,
		     const char *xdg_runtime_dir, uid_t uid, char *out,
		     size_t outsz)
{
	char buf[SOCKPATH_MAX + 1];
	char key[17];
	int r;

	if (!root || !*root)
		return -EINVAL;
	if (vmem_socket && *vmem_socket) {
		r = snprintf(buf, sizeof(buf), "%s", vmem_socket);
	} else {
		sockpath_key(root, key);
		/* XDG: relative values are invalid and ignored. */
		if (xdg_runtime_dir && xdg_runtime_dir[0] == '/')
			r = snprintf(buf, sizeof(buf), "%s/vmem/%s.sock",
				     xdg_runtime_dir, key);
		else
			r = snprintf(buf, sizeof(buf), "/tmp/vmem-%u/%s.sock",
				     (unsigned int)uid, key);
	}
	if (r < 0)
		return -EINVAL;
	if ((size_t)r > SOCKPATH_MAX || (size_t)r >= outsz)
		return -ENAMETOOLONG;
	memcpy(out, buf, (size_t)r + 1);
	return r;
}
