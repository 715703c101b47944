/*
 * libvmem: the client library of vmemd, the memory daemon for AI coding
 * agents. It finds the daemon of a git working tree (starting it when
 * nothing answers), and speaks newline-delimited JSON-RPC 2.0 to it over a
 * Unix socket. JSON crosses this API as text, so callers may use any JSON
 * library.
 *
 * Conventions: functions that can fail return 0 (or a documented positive
 * value) on success and a negative errno on failure. An error answered by
 * the daemon is -EREMOTEIO, with its code, type and message in *err.
 * Strings returned through `char **` out-parameters are owned by the
 * caller and released with vmem_free(). A vmem_client is used by one thread
 * at a time. The library never changes the process's signal handling.
 */
#ifndef VMEM_H
#define VMEM_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(VMEM_BUILDING_LIBRARY)
#define VMEM_EXPORT __attribute__((visibility("default")))
#else
#define VMEM_EXPORT
#endif

#define VMEM_PROTOCOL_VERSION 1

typedef struct vmem_client vmem_client;

/* What went wrong, for humans and for programs. */
struct vmem_error {
	int code;	   /* JSON-RPC error code, 0 for a local failure */
	char type[48];	   /* data.type ("StorageError"...), "" when none */
	char message[512]; /* one line */
};

struct vmem_coord {
	int x, y, z;
};

struct vmem_options {
	/* Any directory inside the working tree; NULL: $VMEM_REPO, else the
	 * current directory. The root is the first directory holding .git
	 * at or above it. */
	const char *repo;
	/* Socket; NULL: $VMEM_SOCKET, else the rule of the design. */
	const char *socket;
	/* Sent with server.hello when not NULL. */
	const char *agent_id;
	/* Start the daemon when nothing answers: -1 default (on unless
	 * $VMEM_NO_AUTOSTART=1), 0 never, 1 always. */
	int autostart;
	/* Per-call timeout in milliseconds; 0 means 30000, < 0 none. */
	int timeout_ms;
};

struct vmem_store_options {
	const char *issue_context_json; /* a JSON object of strings, or NULL */
	const char *agent_id;		/* NULL: the connection's (hello) */
	bool overwrite;
	int64_t if_version; /* compare-and-set when > 0 */
	int timeout_ms;	    /* lock wait; 0: the daemon's default */
};

/*
 * Connect to the daemon of a working tree. opts may be NULL (all defaults).
 * On success *out is a new client (vmem_client_free). Starts the daemon
 * when allowed and needed, then retries with backoff for a bounded time.
 */
VMEM_EXPORT int vmem_client_open(vmem_client **out,
				 const struct vmem_options *opts,
				 struct vmem_error *err);

/* Close the connection and free the client. NULL-safe. */
VMEM_EXPORT void vmem_client_free(vmem_client *c);

/* The socket path in use (borrowed, valid as long as c). */
VMEM_EXPORT const char *vmem_client_socket(const vmem_client *c);

/* The canonical working-tree root (borrowed), or NULL when opened by
 * socket alone. */
VMEM_EXPORT const char *vmem_client_repo(const vmem_client *c);

/*
 * The connected socket of c, for a caller that relays raw NDJSON lines
 * itself (the `vmem mcp` bridge). Borrowed: c still owns it and closes it
 * in vmem_client_free(). Take it between calls only, and do not mix raw
 * I/O with later calls. Returns the fd (non-blocking), -ENOTCONN when not
 * connected, or -EBUSY when the library holds bytes it has read from the
 * daemon but not returned (they would be lost to the caller).
 */
VMEM_EXPORT int vmem_client_fd(const vmem_client *c);

/*
 * Call a method. params_json is a JSON object as text, or NULL for none.
 * On success *result_json (may be NULL if not wanted) receives the result
 * as compact JSON text. Notifications from the daemon that arrive before
 * the response are skipped, unless the client subscribed (a successful
 * watch.subscribe): then they are kept, in order, for
 * vmem_next_notification().
 */
VMEM_EXPORT int vmem_call(vmem_client *c, const char *method,
			  const char *params_json, char **result_json,
			  struct vmem_error *err);

/*
 * The next notification from the daemon (watch.changed after a
 * watch.subscribe), as the JSON text of the whole notification object
 * {"jsonrpc", "method", "params"}, in *json (vmem_free). Waits up to
 * timeout_ms (< 0: forever); -ETIMEDOUT when none came, -ECONNRESET when
 * the daemon closed the connection.
 */
VMEM_EXPORT int vmem_next_notification(vmem_client *c, int timeout_ms,
				       char **json, struct vmem_error *err);

/* server.hello / server.health: result object as JSON text. */
VMEM_EXPORT int vmem_hello(vmem_client *c, const char *agent_id,
			   char **result_json, struct vmem_error *err);
VMEM_EXPORT int vmem_health(vmem_client *c, char **result_json,
			    struct vmem_error *err);

/* server.shutdown: ask the daemon to stop gracefully. */
VMEM_EXPORT int vmem_shutdown(vmem_client *c, struct vmem_error *err);

/* decision.store: *decision_json receives the stored decision. */
VMEM_EXPORT int
vmem_decision_store(vmem_client *c, const struct vmem_coord *coord,
		    const char *content, const struct vmem_store_options *opts,
		    char **decision_json, struct vmem_error *err);

/* decision.get: returns 1 and the decision, or 0 and *decision_json NULL
 * when nothing is stored there. */
VMEM_EXPORT int vmem_decision_get(vmem_client *c,
				  const struct vmem_coord *coord,
				  char **decision_json, struct vmem_error *err);

/* decision.exists: 1 or 0. */
VMEM_EXPORT int vmem_decision_exists(vmem_client *c,
				     const struct vmem_coord *coord,
				     struct vmem_error *err);

/* decision.delete: 1 if it existed, 0 if not. if_version > 0 is a
 * compare-and-set. */
VMEM_EXPORT int vmem_decision_delete(vmem_client *c,
				     const struct vmem_coord *coord,
				     int64_t if_version,
				     struct vmem_error *err);

/*
 * Find the canonical working-tree root the way vmem_client_open() does:
 * the first directory holding .git at or above repo if not NULL, else
 * above $VMEM_REPO, else above the current directory. On success *root
 * is the realpath (caller frees with vmem_free()).
 */
VMEM_EXPORT int vmem_repo_find(const char *repo, char **root,
			       struct vmem_error *err);

/*
 * The vmemd program auto-start runs: $VMEMD if set; else vmemd next to the
 * running program (an installed pair, or the build tree it was built in);
 * else the vmemd of the install prefix; else vmemd found on PATH; else
 * "vmemd" (starting it then fails with a message saying what to do).
 * Borrowed (from the environment or thread-local storage, overwritten by
 * the next call in the same thread).
 */
VMEM_EXPORT const char *vmem_daemon_program(void);

/*
 * Wait up to timeout_ms until the daemon serving socket has exited: the
 * socket refuses connections and, when repo (a working-tree root) is not
 * NULL, the daemon's lock on the tree is released, so every file it
 * writes on a graceful stop is on disk. Returns 0, or -ETIMEDOUT.
 */
VMEM_EXPORT int vmem_daemon_wait_stopped(const char *repo, const char *socket,
					 int timeout_ms,
					 struct vmem_error *err);

/* Free a string returned by the library. NULL-safe. */
VMEM_EXPORT void vmem_free(void *p);

/* A short description of a negative errno returned by the library. */
VMEM_EXPORT const char *vmem_strerror(int err);

#ifdef __cplusplus
}
#endif

#endif
