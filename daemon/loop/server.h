/*
 * The listening socket and the registry of connections: socket directory
 * checks (0700, ours, not a symlink), stale-socket detection, a 0600 socket
 * bound without a chmod window, the peer uid check and the connection
 * limit on every accept.
 */
#ifndef VMEM_DAEMON_SERVER_H
#define VMEM_DAEMON_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <uv.h>

struct daemon;
struct conn;

struct server {
	struct daemon *d;
	uv_pipe_t listener;
	bool listening;
	bool activated; /* the socket came from systemd: not ours to unlink */
	char *path;	/* socket path (owned) */
	ino_t inode;	/* of the socket we bound, to unlink only ours */
	struct conn *conns; /* all open connections */
	size_t n_served;    /* connections counted against the limit */
	/* Connections with notifications to write, flushed once per loop
	 * iteration (after the burst that queued them). */
	uv_check_t flush_check;
	struct conn *flush_list;
	/* Connections whose answer in slices may go on: one slice each per
	 * loop iteration, the loop polling without waiting meanwhile. */
	uv_idle_t slice_idle;
	struct conn *slice_list;
	uv_timer_t sweep; /* line deadlines, once a second */
};

/*
 * Prepare the socket directory, replace a stale socket, bind and listen;
 * or, under socket activation, serve on the socket systemd passed.
 * Returns 0 or -errno with errmsg.
 */
int server_listen(struct server *srv, struct daemon *d, const char *path,
		  char *errmsg, size_t errn);

/* Write c's queued notifications at the end of this loop iteration. */
void server_flush_soon(struct server *srv, struct conn *c);

/* Run c's next slice in the next loop iteration. */
void server_slices_soon(struct server *srv, struct conn *c);

/* Stop accepting and drain every connection. Idempotent. */
void server_stop(struct server *srv);

/* Remove our socket file (if it is still ours) and free the path. Called
 * last, so a vanished socket means every decision is in its file. */
void server_done(struct server *srv);

/* Number of open connections. */
size_t server_connections(const struct server *srv);

#endif
