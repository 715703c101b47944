/* The method table: name -> handler (handlers live in methods_*.c),
 * the MCP methods included. */
#include "methods.h"

#include <stdlib.h>
#include <string.h>

/* Sorted by name for bsearch. */
static const struct method methods[] = {
	{"conflict.list", conflict_list},
	{"conflict.resolve", conflict_resolve},
	{"decision.delete", decision_delete},
	{"decision.exists", decision_exists},
	{"decision.get", decision_get},
	{"decision.history", decision_history},
	{"decision.query_partial_order", decision_query_partial_order},
	{"decision.query_range", decision_query_range},
	{"decision.search", decision_search},
	{"decision.store", decision_store},
	{"decision.store_many", decision_store_many},
	/* documents (methods_document.c) */
	{"document.delete", document_delete},
	{"document.get", document_get},
	{"document.semantic_search", document_semantic_search},
	{"document.store", document_store},
	{"document.temporal_query", document_temporal_query},
	{"document.update", document_update},
	{"experience.delete", experience_delete},
	{"experience.find_similar", experience_find_similar},
	{"experience.get", experience_get},
	{"experience.retrieve", experience_retrieve},
	{"experience.stats", experience_stats},
	{"experience.store", experience_store},
	{"git.log", git_log},
	{"git.reload", git_reload},
	{"git.rollback_point", git_rollback_point},
	{"git.sync", git_sync},
	{"initialize", mcp_initialize},
	{"lock.acquire", lock_acquire},
	{"lock.release", lock_release},
	{"logging/setLevel", mcp_set_level},
	/* messages (methods_conversation.c) */
	{"message.history", message_history},
	{"message.store", message_store},
	{"notifications/cancelled", mcp_cancelled},
	{"notifications/initialized", mcp_initialized},
	{"ping", mcp_ping},
	{"prompts/get", mcp_prompts_get},
	{"prompts/list", mcp_prompts_list},
	{"resources/list", mcp_resources_list},
	{"resources/read", mcp_resources_read},
	{"resources/subscribe", mcp_resources_subscribe},
	{"resources/templates/list", mcp_resources_templates},
	{"resources/unsubscribe", mcp_resources_unsubscribe},
	{"server.flush", server_flush},
	{"server.health", server_health},
	{"server.hello", server_hello},
	{"server.shutdown", server_shutdown},
	{"server.stats", server_stats},
	{"server/discover", mcp_discover},
	/* sessions (methods_conversation.c) */
	{"session.create", session_create},
	{"session.delete", session_delete},
	{"session.get", session_get},
	{"session.list", session_list},
	{"tools/call", mcp_tools_call},
	{"tools/list", mcp_tools_list},
	{"watch.subscribe", watch_subscribe},
	{"watch.unsubscribe", watch_unsubscribe},
};

static int method_cmp(const void *key, const void *elem)
{
	return strcmp(key, ((const struct method *)elem)->name);
}

size_t method_count(void)
{
	return sizeof(methods) / sizeof(methods[0]);
}

size_t method_index(const struct method *m)
{
	return (size_t)(m - methods);
}

const char *method_name(size_t i)
{
	return i < method_count() ? methods[i].name : NULL;
}

const struct method *method_find(const char *name)
{
	return bsearch(name, methods, sizeof(methods) / sizeof(methods[0]),
		       sizeof(methods[0]), method_cmp);
}
