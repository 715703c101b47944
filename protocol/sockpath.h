/*
 * The socket-path rule, shared by the daemon and every client:
 *   1. $VMEM_SOCKET if set and non-empty;
 *   2. else $XDG_RUNTIME_DIR/vmem/<key>.sock;
 *   3. else /tmp/vmem-<uid>/<key>.sock;
 * <key> is 16 lowercase hex digits of the 64-bit FNV-1a hash of the
 * canonical working-tree root. Pure: the environment is passed in.
 *
 * The rule depends on the environment, and MCP hosts start servers with
 * a short one (no XDG_RUNTIME_DIR), so a running daemon also records the
 * path it listens on in its state directory, <gitdir>/vmem/SOCKPATH_RECORD
 * (one line, the absolute path); clients without an explicit socket try
 * that path first, then the rule.
 */
#ifndef VMEM_PROTOCOL_SOCKPATH_H
#define VMEM_PROTOCOL_SOCKPATH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The longest socket path that fits sockaddr_un.sun_path with its NUL. */
#define SOCKPATH_MAX 107

/* The file in <gitdir>/vmem naming the socket the daemon listens on. */
#define SOCKPATH_RECORD "socket"
/* Its largest size: a path and a newline. */
#define SOCKPATH_RECORD_MAX (SOCKPATH_MAX + 1)

/* The 16-hex-digit key of a canonical root into key[17]. */
void sockpath_key(const char *root, char key[17]);

/*
 * Resolve the socket path for a canonical working-tree root.
 * vmem_socket and xdg_runtime_dir may be NULL (unset). Returns the path
 * length, or -ENAMETOOLONG when it would not fit sun_path (never
 * truncated), or -EINVAL for an empty root.
 */
int sockpath_resolve(const char *root, const char *vmem_socket,
		     const char *xdg_runtime_dir, uid_t uid, char *out,
		     size_t outsz);

#endif
