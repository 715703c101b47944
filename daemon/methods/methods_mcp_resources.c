/*
 * MCP resources and prompts. Every decision is a resource,
 * vmem://decision/{x}/{y}/{z} (a resource template); resources/list pages
 * through them newest first; resources/subscribe rides on the watch
 * machinery (subs.h) and sends notifications/resources/updated, and a
 * session that listed resources is sent notifications/resources/
 * list_changed (at most one per loop iteration). The prompts give a model
 * the decisions before a point of the work, grouped by layer and bounded
 * (context_for), and a guide to recording one (record_decision).
 *
 * Everything here reads the index on the loop thread and builds a bounded
 * answer: pages of MCP_RESOURCE_PAGE, prompts under MCP_PAGE_BYTES.
 */
#include "methods.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "conn.h"
#include "daemon.h"
#include "dispatch.h"
#include "mcp_tools.h"
#include "protocol/decision.h"
#include "protocol/errors.h"
#include "query.h"

#define MCP_RESOURCE_PAGE 50
#define URI_PREFIX	  "vmem://decision/"
#define URI_TEMPLATE	  URI_PREFIX "{x}/{y}/{z}"
#define DESC_PREVIEW	  200 /* bytes of content in a resource's description */
/* MCP's error for an unknown resource (its specification's code). */
#define RPC_RESOURCE_NOT_FOUND -32002

static const char *const layer_names[] = {"", "Architecture", "Interfaces",
					  "Implementation", "Ephemeral"};
static const char *const stage_names[] = {"",	       "architect", "test",
					  "implement", "review",    "merge"};

/* A strictly written integer 1..max at *p ending at end_char; advances. */
static bool uri_int(const char **p, char end_char, int max, int *out)
{
	long v = 0;
	const char *s = *p;

	if (*s < '1' || *s > '9')
		return false;
	while (*s >= '0' && *s <= '9' && v <= max)
		v = v * 10 + (*s++ - '0');
	if (v > max || *s != end_char)
		return false;
	*out = (int)v;
	*p = s + (end_char ? 1 : 0);
	return true;
}

/* The coordinate of vmem://decision/x/y/z (no leading zeros, in the
 * domain), or false. */
static bool uri_coord(const char *uri, int max_x, struct coord *c)
{
	const char *p = uri;

	if (strncmp(p, URI_PREFIX, strlen(URI_PREFIX)) != 0)
		return false;
	p += strlen(URI_PREFIX);
	return uri_int(&p, '/', max_x, &c->x) &&
	       uri_int(&p, '/', VMEM_MAX_Y, &c->y) &&
	       uri_int(&p, '\0', VMEM_MAX_Z, &c->z);
}

/* The uri param of a resources request as a coordinate; answers the
 * call with an error and returns false otherwise. */
static bool param_uri(struct call *call, struct coord *c, const char **uri)
{
	json_t *v = json_object_get(call->params, "uri");

	if (!json_is_string(v)) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "uri must be a string");
		return false;
	}
	*uri = json_string_value(v);
	if (!uri_coord(*uri, call->d->limits.max_x, c)) {
		call_error(call, RPC_RESOURCE_NOT_FOUND,
			   json_pack("{s:s,s:s}", "type", "ResourceNotFound",
				     "uri", *uri),
			   "Resource not found: %.200s is not "
			   "vmem://decision/{x}/{y}/{z} of this memory",
			   *uri);
		return false;
	}
	return true;
}

/* The 27-byte timestamp inside a record's compact JSON (after its
 * content: the members are in a fixed order). */
static const char *record_time(const struct record *r)
{
	static const char key[] = "\"timestamp\":\"";
	const char *after = r->json + r->content_off + r->content_esc_len;
	const char *t = strstr(after, key);

	return t ? t + sizeof(key) - 1 : "";
}

/* Newer first; equal times by slot. */
static bool newer(const char *ta, size_t sa, const char *tb, size_t sb)
{
	int c = strncmp(ta, tb, VMEM_TIMESTAMP_LEN);

	return c > 0 || (c == 0 && sa < sb);
}

/* "<timestamp>/<slot>": where the previous page ended. */
static bool parse_cursor(const char *s, char *ts, size_t *slot)
{
	char *end;
	unsigned long long v;

	if (strlen(s) < VMEM_TIMESTAMP_LEN + 2 || s[VMEM_TIMESTAMP_LEN] != '/')
		return false;
	memcpy(ts, s, VMEM_TIMESTAMP_LEN);
	ts[VMEM_TIMESTAMP_LEN] = '\0';
	v = strtoull(s + VMEM_TIMESTAMP_LEN + 1, &end, 10);
	if (*end || end == s + VMEM_TIMESTAMP_LEN + 1)
		return false;
	*slot = (size_t)v;
	return true;
}

/* A resource of resources/list: uri, name, title, description (the
 * content's start), mimeType, size and annotations.lastModified. */
static json_t *resource_json(const struct record *r, struct buf *text)
{
	char uri[64], name[64], title[128], when[VMEM_TIMESTAMP_LEN + 1];
	json_t *desc;

	snprintf(uri, sizeof(uri), URI_PREFIX "%d/%d/%d", r->coord.x,
		 r->coord.y, r->coord.z);
	snprintf(name, sizeof(name), "decision-%d-%d-%d", r->coord.x,
		 r->coord.y, r->coord.z);
	snprintf(title, sizeof(title), "Issue %d, %s stage, %s layer",
		 r->coord.x, stage_names[r->coord.y], layer_names[r->coord.z]);
	memcpy(when, record_time(r), VMEM_TIMESTAMP_LEN);
	when[VMEM_TIMESTAMP_LEN] = '\0';
	if (record_content(r, text) < 0)
		return NULL;
	desc = mcp_preview(text->data, text->len, DESC_PREVIEW);
	if (!desc)
		desc = json_stringn(text->data, text->len);
	return json_pack("{s:s,s:s,s:s,s:o,s:s,s:I,s:{s:s}}", "uri", uri,
			 "name", name, "title", title, "description", desc,
			 "mimeType", "application/json", "size",
			 (json_int_t)r->json_len, "annotations", "lastModified",
			 when);
}

/* Subscribe this session to list_changed once it lists resources. */
static void watch_list(struct call *call)
{
	static const struct axis_range all = {1, INT32_MAX};
	struct conn *c = call->conn;
	uint64_t id;

	if (c->mcp_list_watch)
		return;
	if (subs_add_format(&call->d->subs, c, &all, &all, &all, SUBS_MCP_LIST,
			    &id) == 0)
		c->mcp_list_watch = true;
}

int mcp_resources_list(struct call *call)
{
	const struct index *ix = &call->d->decisions.index;
	json_t *cursor = json_object_get(call->params, "cursor");
	const struct record *page[MCP_RESOURCE_PAGE + 1];
	size_t n = 0, cur_slot = 0;
	char cur_ts[VMEM_TIMESTAMP_LEN + 1] = "";
	struct buf text = {0};
	json_t *list = NULL;
	bool more = false;

	if (cursor && !json_is_null(cursor) &&
	    (!json_is_string(cursor) ||
	     !parse_cursor(json_string_value(cursor), cur_ts, &cur_slot))) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "cursor is not one this server gave");
		return CALL_DONE;
	}
	/* The newest page after the cursor: one pass, kept sorted by
	 * insertion (a page is small). */
	for (size_t slot = 0; slot < ix->n_slots; slot++) {
		const struct record *r = ix->slots[slot];
		const char *t;
		size_t i;

		if (!r)
			continue;
		t = record_time(r);
		if (cur_ts[0] && !newer(cur_ts, cur_slot, t, slot))
			continue;
		for (i = n; i > 0; i--) {
			const struct record *p = page[i - 1];

			if (!newer(t, slot, record_time(p),
				   index_slot(ix, &p->coord)))
				break;
		}
		if (i > MCP_RESOURCE_PAGE)
			continue;
		if (n < MCP_RESOURCE_PAGE + 1)
			n++;
		memmove(&page[i + 1], &page[i], (n - 1 - i) * sizeof(*page));
		page[i] = r;
	}
	if (n > MCP_RESOURCE_PAGE) {
		more = true;
		n = MCP_RESOURCE_PAGE;
	}
	list = json_array();
	for (size_t i = 0; list && i < n; i++)
		if (json_array_append_new(list, resource_json(page[i], &text)) <
		    0) {
			json_decref(list);
			list = NULL;
		}
	buf_done(&text);
	watch_list(call);
	if (!list) {
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return CALL_DONE;
	}
	if (more) {
		char next[VMEM_TIMESTAMP_LEN + 32];
		const struct record *last = page[n - 1];

		snprintf(next, sizeof(next), "%.*s/%zu", VMEM_TIMESTAMP_LEN,
			 record_time(last), index_slot(ix, &last->coord));
		call_reply(call, json_pack("{s:o,s:s}", "resources", list,
					   "nextCursor", next));
	} else {
		call_reply(call, json_pack("{s:o}", "resources", list));
	}
	return CALL_DONE;
}

int mcp_resources_templates(struct call *call)
{
	call_reply(call,
		   json_pack("{s:[{s:s,s:s,s:s,s:s,s:s}]}", "resourceTemplates",
			     "uriTemplate", URI_TEMPLATE, "name", "decision",
			     "title", "A decision", "description",
			     "The decision at coordinate (x, y, z): x the "
			     "issue number, y the cycle stage (1 architect, "
			     "2 test, 3 implement, 4 review, 5 merge), z the "
			     "layer (1 Architecture, 2 Interfaces, "
			     "3 Implementation, 4 Ephemeral). JSON: "
			     "coordinate, content, timestamp, agent_id, "
			     "issue_context, version.",
			     "mimeType", "application/json"));
	return CALL_DONE;
}

int mcp_resources_read(struct call *call)
{
	const struct record *r;
	struct coord c;
	const char *uri;

	if (!param_uri(call, &c, &uri))
		return CALL_DONE;
	r = index_get(&call->d->decisions.index, &c);
	if (!r) {
		call_error(call, RPC_RESOURCE_NOT_FOUND,
			   json_pack("{s:s,s:s}", "type", "ResourceNotFound",
				     "uri", uri),
			   "Resource not found: no decision at (%d, %d, %d)",
			   c.x, c.y, c.z);
		return CALL_DONE;
	}
	call_reply(call, json_pack("{s:[{s:s,s:s,s:s%}]}", "contents", "uri",
				   uri, "mimeType", "application/json", "text",
				   r->json, r->json_len));
	return CALL_DONE;
}

/* resources/subscribe and unsubscribe: a one-coordinate box. */
int mcp_resources_subscribe(struct call *call)
{
	struct axis_range x, y, z;
	struct coord c;
	const char *uri;
	uint64_t id;

	if (!param_uri(call, &c, &uri))
		return CALL_DONE;
	x = (struct axis_range){c.x, c.x};
	y = (struct axis_range){c.y, c.y};
	z = (struct axis_range){c.z, c.z};
	if (!subs_find(&call->d->subs, call->conn, SUBS_MCP_RESOURCE, &x, &y,
		       &z) &&
	    subs_add_format(&call->d->subs, call->conn, &x, &y, &z,
			    SUBS_MCP_RESOURCE, &id) < 0) {
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return CALL_DONE;
	}
	call_reply(call, json_object());
	return CALL_DONE;
}

int mcp_resources_unsubscribe(struct call *call)
{
	struct axis_range x, y, z;
	struct subscription *sub;
	struct coord c;
	const char *uri;

	if (!param_uri(call, &c, &uri))
		return CALL_DONE;
	x = (struct axis_range){c.x, c.x};
	y = (struct axis_range){c.y, c.y};
	z = (struct axis_range){c.z, c.z};
	sub = subs_find(&call->d->subs, call->conn, SUBS_MCP_RESOURCE, &x, &y,
			&z);
	if (sub)
		subs_remove(&call->d->subs, call->conn, sub->id);
	call_reply(call, json_object());
	return CALL_DONE;
}

/* ---- prompts ---- */

int mcp_prompts_list(struct call *call)
{
	call_reply(
		call,
		json_pack(
			"{s:[{s:s,s:s,s:s,s:[{s:s,s:s,s:b},{s:s,s:s,s:b}]},"
			"{s:s,s:s,s:s,s:[{s:s,s:s,s:b},{s:s,s:s,s:b},{s:s,"
			"s:s,s:b}]}]}",
			"prompts", "name", "context_for", "title",
			"Context for a stage of an issue", "description",
			"The decisions made before stage y of issue x (earlier "
			"issues, and earlier stages of x), grouped by layer, "
			"to start that work from what was decided.",
			"arguments", "name", "x", "description",
			"The issue number.", "required", 1, "name", "y",
			"description",
			"The stage about to start: 1 architect, 2 test, "
			"3 implement, 4 review, 5 merge.",
			"required", 1, "name", "record_decision", "title",
			"Record a decision", "description",
			"How to record a decision in vmem: choosing its "
			"coordinate and layer, then store_decision.",
			"arguments", "name", "x", "description",
			"The issue number, if known.", "required", 0, "name",
			"y", "description", "The stage, if known.", "required",
			0, "name", "summary", "description",
			"What was decided, in a sentence.", "required", 0));
	return CALL_DONE;
}

/* A prompt argument: a string holding an integer 1..max (MCP passes
 * prompt arguments as strings); 0 when absent. -1 when malformed. */
static int prompt_int(json_t *args, const char *name, int max)
{
	json_t *v = json_object_get(args, name);
	const char *s;
	int out;

	if (!v)
		return 0;
	if (json_is_integer(v))
		return json_integer_value(v) >= 1 &&
				       json_integer_value(v) <= max
			       ? (int)json_integer_value(v)
			       : -1;
	if (!json_is_string(v))
		return -1;
	s = json_string_value(v);
	return uri_int(&s, '\0', max, &out) ? out : -1;
}

static void reply_prompt(struct call *call, const char *desc, struct buf *b)
{
	json_t *r = json_pack("{s:s,s:[{s:s,s:{s:s,s:s%}}]}", "description",
			      desc, "messages", "role", "user", "content",
			      "type", "text", "text", b->data, b->len);

	call_reply(call, r);
}

/* One line of context_for: "- (x, y, z) vN by AGENT: content", the
 * content cut to a preview. */
static bool context_line(struct buf *b, const struct record *r)
{
	json_t *d = json_loadb(r->json, r->json_len, 0, NULL);
	json_t *content = json_object_get(d, "content");
	const char *agent = json_string_value(json_object_get(d, "agent_id"));
	size_t len = json_string_length(content);
	char head[256];
	bool cut = len > MCP_PREVIEW_BYTES, ok;
	size_t keep = len;

	if (!d || !json_is_string(content)) {
		json_decref(d);
		return false;
	}
	if (cut) {
		json_t *p = mcp_preview(json_string_value(content), len,
					MCP_PREVIEW_BYTES);

		keep = p ? json_string_length(p) : 0;
		json_decref(p);
	}
	snprintf(head, sizeof(head),
		 "- (%d, %d, %d) v%" PRId64 " by %s: ", r->coord.x, r->coord.y,
		 r->coord.z, r->version, agent ? agent : "?");
	ok = buf_puts(b, head) &&
	     buf_append(b, json_string_value(content), keep) &&
	     (!cut || buf_puts(b, " [cut: get_decision shows it whole]")) &&
	     buf_puts(b, "\n");
	json_decref(d);
	return ok;
}

static int prompt_context(struct call *call, json_t *args)
{
	const struct index *ix = &call->d->decisions.index;
	int x = prompt_int(args, "x", call->d->limits.max_x);
	int y = prompt_int(args, "y", VMEM_MAX_Y);
	const struct record **recs = NULL;
	struct buf b = {0};
	size_t n = 0, left = 0;
	char line[512];
	bool ok;

	if (x <= 0 || y <= 0) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "context_for needs x (1..%d) and y (1..5)",
			   call->d->limits.max_x);
		return CALL_DONE;
	}
	if (query_before(ix, x, y, 0, &recs, &n) < 0) {
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
		return CALL_DONE;
	}
	snprintf(line, sizeof(line),
		 "You are starting the %s stage (y=%d) of issue %d. These "
		 "are the decisions recorded before it in vmem (earlier "
		 "issues, and earlier stages of issue %d), by layer. Respect "
		 "the Architecture ones (write-once); record what you decide "
		 "with store_decision at x=%d, y=%d.\n",
		 stage_names[y], y, x, x, x, y);
	ok = buf_puts(&b, line);
	/* Grouped by layer, each in (x, y) order; bounded as a page. */
	for (int z = 1; ok && z <= VMEM_MAX_Z; z++) {
		bool header = false;

		for (size_t i = 0; ok && i < n; i++) {
			if (recs[i]->coord.z != z)
				continue;
			if (b.len >= MCP_PAGE_BYTES) {
				left++;
				continue;
			}
			if (!header) {
				snprintf(line, sizeof(line),
					 "\n## Layer %d: %s\n", z,
					 layer_names[z]);
				ok = buf_puts(&b, line);
				header = true;
			}
			ok = ok && context_line(&b, recs[i]);
		}
	}
	if (ok && n == 0)
		ok = buf_puts(&b, "\nNo decision was recorded before this "
				  "point.\n");
	if (ok && left) {
		snprintf(line, sizeof(line),
			 "\n%zu more decisions are not shown (this prompt "
			 "stays under %d KB): list them with decisions_before "
			 "x_threshold=%d y_threshold=%d.\n",
			 left, MCP_PAGE_BYTES / 1024, x, y);
		ok = buf_puts(&b, line);
	}
	free(recs);
	if (ok)
		reply_prompt(call, "Decisions before this stage", &b);
	else
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
	buf_done(&b);
	return CALL_DONE;
}

static int prompt_record(struct call *call, json_t *args)
{
	int x = prompt_int(args, "x", call->d->limits.max_x);
	int y = prompt_int(args, "y", VMEM_MAX_Y);
	json_t *summary = json_object_get(args, "summary");
	struct buf b = {0};
	char line[512];
	bool ok;

	if (x < 0 || y < 0 || (summary && !json_is_string(summary))) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "record_decision takes x (1..%d), y (1..5) and a "
			   "summary, all optional",
			   call->d->limits.max_x);
		return CALL_DONE;
	}
	ok = buf_puts(&b, "Record a decision in vmem, the shared decision "
			  "memory of this repository.\n");
	if (summary && ok)
		ok = buf_puts(&b, "The decision: ") &&
		     buf_append(&b, json_string_value(summary),
				json_string_length(summary)) &&
		     buf_puts(&b, "\n");
	if (x > 0)
		snprintf(line, sizeof(line), "x = %d (the issue).\n", x);
	else
		snprintf(line, sizeof(line),
			 "x: the number of the issue it belongs to "
			 "(1..%d).\n",
			 call->d->limits.max_x);
	ok = ok && buf_puts(&b, line);
	if (y > 0)
		snprintf(line, sizeof(line), "y = %d (the %s stage).\n", y,
			 stage_names[y]);
	else
		snprintf(line, sizeof(line),
			 "y: the stage in which it was decided: 1 architect, "
			 "2 test, 3 implement, 4 review, 5 merge.\n");
	ok = ok && buf_puts(&b, line) &&
	     buf_puts(&b,
		      "z, the layer, by how lasting the decision is:\n"
		      "- 1 Architecture: structure others build on (a "
		      "database, a protocol, a module boundary). Write-once: "
		      "it can never be changed or deleted, so store it only "
		      "when it is settled.\n"
		      "- 2 Interfaces: signatures, schemas, formats that "
		      "others call or read.\n"
		      "- 3 Implementation: how a part is built.\n"
		      "- 4 Ephemeral: working notes for the moment.\n"
		      "Then: call get_decision at (x, y, z); if something is "
		      "there, either choose another layer or, at layers 2-4, "
		      "replace it with overwrite: true (or if_version: its "
		      "version). Call store_decision with x, y, z and content "
		      "(one decision, its reason in a sentence or two; at "
		      "most 100 KB); add issue_context {\"issue_id\", "
		      "\"issue_title\"} when known.\n");
	if (ok)
		reply_prompt(call, "How to record a decision", &b);
	else
		call_error(call, RPC_INTERNAL_ERROR, NULL, "out of memory");
	buf_done(&b);
	return CALL_DONE;
}

int mcp_prompts_get(struct call *call)
{
	json_t *name = json_object_get(call->params, "name");
	json_t *args = json_object_get(call->params, "arguments");

	if (args && !json_is_null(args) && !json_is_object(args)) {
		call_error(call, RPC_INVALID_PARAMS, NULL,
			   "arguments must be an object");
		return CALL_DONE;
	}
	if (json_is_string(name) &&
	    !strcmp(json_string_value(name), "context_for"))
		return prompt_context(call, args);
	if (json_is_string(name) &&
	    !strcmp(json_string_value(name), "record_decision"))
		return prompt_record(call, args);
	call_error(call, RPC_INVALID_PARAMS, NULL, "Unknown prompt: %.200s",
		   json_is_string(name) ? json_string_value(name) : "(none)");
	return CALL_DONE;
}
