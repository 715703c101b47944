/*
 * The method table: name -> handler. Handlers validate their params by
 * name (unknown members are a ValueError), do their work through the
 * store, and answer through the call (dispatch.h).
 */
#ifndef VMEM_DAEMON_METHODS_H
#define VMEM_DAEMON_METHODS_H

struct call;

struct method {
	const char *name;
	int (*handler)(struct call *call); /* CALL_DONE or CALL_ASYNC */
};

/* The method called name, or NULL. */
const struct method *method_find(const char *name);

#endif
