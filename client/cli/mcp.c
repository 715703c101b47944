/*
 * `vmem mcp`: the stdio MCP server. The daemon answers MCP itself, so this
 * is a byte relay between stdin/stdout and the daemon's socket: lines pass
 * unchanged, whatever their size or however they are split, because no
 * line is ever parsed here. Each direction has one bounded buffer, and a
 * side is polled for input only while its buffer has room, so a slow
 * reader holds back its writer (backpressure) instead of growing memory.
 * Invariants: stdout carries only bytes the daemon sent; at stdin EOF our
 * sending side of the socket is shut down once everything is sent, and
 * the daemon closes after answering all of it, which ends the relay.
 */
#include "mcp.h"

#include "vmem.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RELAY_SIZE ((size_t)256 * 1024)
#define DRAIN_MS   10000 /* wait for answers after stdin EOF (default) */

enum { MCP_OK = 0, MCP_FAILED = 1, MCP_NO_DAEMON = 2 };

/* Bytes read from one side and not yet written to the other. */
struct relay {
	char *data; /* RELAY_SIZE bytes */
	size_t start;
	size_t len;
};

struct bridge {
	int in, out, sock;
	struct relay up;   /* stdin -> daemon */
	struct relay down; /* daemon -> stdout */
	bool in_eof;	   /* stdin ended */
	bool last_lf;	   /* the last byte taken from stdin was LF */
	bool shut;	   /* our sending side of the socket is shut down */
	bool send_dead;	   /* the daemon stopped reading (EPIPE...) */
	bool sock_eof;	   /* the daemon closed the connection */
	int out_sock;	   /* stdout is a socket: 1, not: 0, unknown: -1 */
	int64_t deadline;  /* end of the drain after stdin EOF */
};

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Free space at the tail of r, compacting first when that makes room. */
static size_t relay_room(struct relay *r, char **tail)
{
	if (r->start > 0 && r->start + r->len == RELAY_SIZE) {
		memmove(r->data, r->data + r->start, r->len);
		r->start = 0;
	}
	if (r->len == 0)
		r->start = 0;
	*tail = r->data + r->start + r->len;
	return RELAY_SIZE - r->start - r->len;
}

static void relay_consume(struct relay *r, size_t n)
{
	r->start += n;
	r->len -= n;
	if (r->len == 0)
		r->start = 0;
}

/* Read what stdin has; 0, or a negative errno. */
static int read_stdin(struct bridge *b)
{
	char *tail;
	size_t room = relay_room(&b->up, &tail);
	ssize_t n;

	if (room == 0)
		return 0;
	do
		n = read(b->in, tail, room);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
	if (n == 0) {
		b->in_eof = true;
		return 0;
	}
	b->up.len += (size_t)n;
	b->last_lf = tail[n - 1] == '\n';
	return 0;
}

/* Send buffered input to the daemon; 0, or a negative errno. */
static int send_up(struct bridge *b)
{
	ssize_t n;

	while (b->up.len > 0) {
		n = send(b->sock, b->up.data + b->up.start, b->up.len,
			 MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK ? 0
								       : -errno;
		relay_consume(&b->up, (size_t)n);
	}
	return 0;
}

/* Read what the daemon sent; 0, or a negative errno. */
static int recv_down(struct bridge *b)
{
	char *tail;
	size_t room = relay_room(&b->down, &tail);
	ssize_t n;

	if (room == 0)
		return 0;
	do
		n = recv(b->sock, tail, room, MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
	if (n == 0)
		b->sock_eof = true;
	b->down.len += (size_t)n;
	return 0;
}

/*
 * Write buffered answers to stdout without blocking: send() with
 * MSG_DONTWAIT when stdout is a socket (as MCP clients built on libuv
 * give us), else at most PIPE_BUF bytes, which a pipe that polled
 * writable takes whole. 0, or a negative errno.
 */
static int write_down(struct bridge *b)
{
	size_t chunk = b->down.len;
	ssize_t n = -1;

	if (chunk == 0)
		return 0;
	for (;;) {
		if (b->out_sock != 0) {
			n = send(b->out, b->down.data + b->down.start, chunk,
				 MSG_DONTWAIT | MSG_NOSIGNAL);
			if (n < 0 && errno == ENOTSOCK) {
				b->out_sock = 0;
				continue;
			}
			if (n >= 0)
				b->out_sock = 1;
		} else {
			if (chunk > PIPE_BUF)
				chunk = PIPE_BUF;
			n = write(b->out, b->down.data + b->down.start, chunk);
		}
		if (n >= 0 || errno != EINTR)
			break;
	}
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
	relay_consume(&b->down, (size_t)n);
	return 0;
}

/* After stdin EOF and everything sent: end the last line, then tell the
 * daemon no more requests come (it answers the rest, then closes). */
static int finish_input(struct bridge *b)
{
	if (!b->last_lf) {
		b->up.data[b->up.len++] = '\n';
		b->last_lf = true;
		return 0;
	}
	if (shutdown(b->sock, SHUT_WR) < 0 && errno != ENOTCONN)
		return -errno;
	b->shut = true;
	return 0;
}

static int poll_timeout(const struct bridge *b)
{
	int64_t left;

	if (!b->in_eof)
		return -1;
	left = b->deadline - now_ms();
	if (left < 0)
		return 0;
	return left > INT_MAX ? INT_MAX : (int)left;
}

/* The relay loop; returns the exit status. */
static int relay(struct bridge *b, int drain_ms)
{
	struct pollfd pfd[3];
	struct pollfd *pin, *psock, *pout;
	short ev;
	int n, rc;

	for (;;) {
		if (b->in_eof && b->deadline == 0)
			b->deadline = now_ms() + drain_ms;
		if (b->in_eof && b->up.len == 0 && !b->shut && !b->send_dead) {
			rc = finish_input(b);
			if (rc < 0) {
				fprintf(stderr, "vmem mcp: %s\n",
					strerror(-rc));
				return MCP_FAILED;
			}
		}
		if (b->sock_eof && b->down.len == 0) {
			if (b->shut)
				return MCP_OK;
			fputs("vmem mcp: the daemon closed the connection\n",
			      stderr);
			return MCP_FAILED;
		}
		if (b->in_eof && now_ms() >= b->deadline) {
			fprintf(stderr,
				"vmem mcp: no end of answers from the daemon "
				"%d ms after end of input\n",
				drain_ms);
			return MCP_FAILED;
		}

		pin = psock = pout = NULL;
		n = 0;
		if (!b->in_eof && !b->send_dead && b->up.len < RELAY_SIZE) {
			pin = &pfd[n++];
			*pin = (struct pollfd){.fd = b->in, .events = POLLIN};
		}
		ev = 0;
		if (b->up.len > 0 && !b->send_dead)
			ev |= POLLOUT;
		if (!b->sock_eof && b->down.len < RELAY_SIZE)
			ev |= POLLIN;
		if (ev) {
			psock = &pfd[n++];
			*psock = (struct pollfd){.fd = b->sock, .events = ev};
		}
		if (b->down.len > 0) {
			pout = &pfd[n++];
			*pout = (struct pollfd){.fd = b->out,
						.events = POLLOUT};
		}
		if (poll(pfd, (nfds_t)n, poll_timeout(b)) < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "vmem mcp: poll: %s\n",
				strerror(errno));
			return MCP_FAILED;
		}

		if (pin && (pin->revents & POLLNVAL)) {
			b->in_eof = true;
		} else if (pin && pin->revents) {
			rc = read_stdin(b);
			if (rc < 0) {
				fprintf(stderr, "vmem mcp: stdin: %s\n",
					strerror(-rc));
				return MCP_FAILED;
			}
		}
		if (psock && (psock->revents & POLLNVAL)) {
			fputs("vmem mcp: lost the daemon's socket\n", stderr);
			return MCP_FAILED;
		}
		if (psock && (psock->revents & (POLLOUT | POLLERR | POLLHUP)) &&
		    b->up.len > 0 && !b->send_dead) {
			rc = send_up(b);
			if (rc < 0) {
				/* The daemon hung up on us; whatever it said
				 * last is still to be read and relayed. */
				b->send_dead = true;
				b->up.len = 0;
			}
		}
		if (psock && (psock->revents & (POLLIN | POLLERR | POLLHUP)) &&
		    !b->sock_eof) {
			rc = recv_down(b);
			if (rc < 0) {
				fprintf(stderr, "vmem mcp: %s: %s\n",
					"the daemon's connection",
					strerror(-rc));
				b->sock_eof = true;
				b->shut = false;
			}
		}
		if (pout && pout->revents) {
			rc = pout->revents & POLLNVAL ? -EBADF : write_down(b);
			if (rc < 0) {
				fprintf(stderr, "vmem mcp: stdout: %s\n",
					strerror(-rc));
				return MCP_FAILED;
			}
		}
	}
}

int mcp_run(const struct mcp_options *opts)
{
	struct vmem_options o = {0};
	struct vmem_error err;
	struct bridge b = {.in = STDIN_FILENO,
			   .out = STDOUT_FILENO,
			   .sock = -1,
			   .last_lf = true,
			   .out_sock = -1};
	vmem_client *c = NULL;
	int rc, status = MCP_NO_DAEMON;

	/* A client gone away is seen as EPIPE, never a fatal signal. */
	signal(SIGPIPE, SIG_IGN);
	b.up.data = malloc(RELAY_SIZE);
	b.down.data = malloc(RELAY_SIZE);
	if (!b.up.data || !b.down.data) {
		fputs("vmem mcp: out of memory\n", stderr);
		goto out;
	}
	o.repo = opts->repo;
	o.socket = opts->socket;
	/* libvmem sends server.hello with it and takes the answer before
	 * the relay starts, so no client id can collide with it. */
	o.agent_id = opts->agent_id;
	o.autostart = opts->autostart;
	o.timeout_ms = opts->timeout_ms;
	rc = vmem_client_open(&c, &o, &err);
	if (rc < 0) {
		/* The daemon refused the hello (a bad agent id): a domain
		 * error, status 1 as everywhere in the CLI. */
		if (err.code != 0)
			status = MCP_FAILED;
		fprintf(stderr, "vmem mcp: %s%s%s\n", err.type,
			err.type[0] ? ": " : "",
			err.message[0] ? err.message : vmem_strerror(rc));
		goto out;
	}
	rc = vmem_client_fd(c);
	if (rc < 0) {
		fprintf(stderr, "vmem mcp: %s\n", vmem_strerror(rc));
		goto out;
	}
	b.sock = rc;
	status = relay(&b, opts->timeout_ms > 0 ? opts->timeout_ms : DRAIN_MS);
out:
	vmem_client_free(c);
	free(b.up.data);
	free(b.down.data);
	return status;
}
