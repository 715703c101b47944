/*
 * The method table: name -> handler. Handlers validate their params by
 * name (params.h), do their work through the store and the query modules,
 * and answer through the call (dispatch.h). They return CALL_DONE, or
 * CALL_ASYNC when they will answer later.
 */
#ifndef VMEM_DAEMON_METHODS_H
#define VMEM_DAEMON_METHODS_H

#include <jansson.h>

#include <stddef.h>

struct call;

struct method {
	const char *name;
	int (*handler)(struct call *call);
};

/* The method called name, or NULL. */
const struct method *method_find(const char *name);

/* The table: its size, a method's place in it, the name at a place. */
size_t method_count(void);
size_t method_index(const struct method *m);
const char *method_name(size_t i);

/* methods_server.c */
struct vmdir_load_report;
/* [{"path", "moved_to", "reason"}...] of a load's quarantined files. */
json_t *quarantined_json(const struct vmdir_load_report *rep);
int server_hello(struct call *call);
int server_health(struct call *call);
int server_flush(struct call *call);
int server_shutdown(struct call *call);
int server_stats(struct call *call);

/* methods_conflict.c */
struct daemon;
/* The conflicts (at most limit) and the dropped versions, for health. */
json_t *conflicts_json(const struct daemon *d, size_t limit);
json_t *drops_json(const struct daemon *d);
int conflict_list(struct call *call);
int conflict_resolve(struct call *call);

/* methods_decision.c */
int decision_get(struct call *call);
int decision_exists(struct call *call);
int decision_store(struct call *call);
int decision_delete(struct call *call);
int decision_store_many(struct call *call);

/* methods_experience.c */
int experience_store(struct call *call);
int experience_get(struct call *call);
int experience_delete(struct call *call);
int experience_retrieve(struct call *call);
int experience_find_similar(struct call *call);
int experience_stats(struct call *call);

/* methods_git.c */
int git_sync(struct call *call);
int git_reload(struct call *call);
int git_log(struct call *call);
int decision_history(struct call *call);
int git_rollback_point(struct call *call);

/* methods_query.c */
int decision_query_range(struct call *call);
int decision_query_partial_order(struct call *call);
int decision_search(struct call *call);

/* methods_lock.c */
int lock_acquire(struct call *call);
int lock_release(struct call *call);

/* methods_watch.c */
int watch_subscribe(struct call *call);
int watch_unsubscribe(struct call *call);

/* methods_conversation.c: sessions and messages. */
int session_create(struct call *call);
int session_get(struct call *call);
int session_list(struct call *call);
int session_delete(struct call *call);
int message_store(struct call *call);
int message_history(struct call *call);

/* methods_document.c: documents. */
int document_store(struct call *call);
int document_get(struct call *call);
int document_update(struct call *call);
int document_delete(struct call *call);
int document_semantic_search(struct call *call);
int document_temporal_query(struct call *call);

/* methods_mcp.c: MCP on the same socket. */
int mcp_initialize(struct call *call);
int mcp_initialized(struct call *call);
int mcp_discover(struct call *call);
int mcp_ping(struct call *call);
int mcp_set_level(struct call *call);
int mcp_cancelled(struct call *call);
int mcp_tools_list(struct call *call);
int mcp_tools_call(struct call *call);

/* methods_mcp_resources.c: MCP resources and prompts. */
int mcp_resources_list(struct call *call);
int mcp_resources_templates(struct call *call);
int mcp_resources_read(struct call *call);
int mcp_resources_subscribe(struct call *call);
int mcp_resources_unsubscribe(struct call *call);
int mcp_prompts_list(struct call *call);
int mcp_prompts_get(struct call *call);

#endif
