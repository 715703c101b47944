/*
 * Unit tests of daemon/find/convindex.c: sessions and messages in memory.
 * Activity order over all users and per user (a message moves its
 * session to the front, out-of-order times are placed where they
 * belong), lists after a cursor, replacing and deleting records, messages
 * arriving before their session (placeholders, adopted at the end), the
 * id maps, and the wire forms. A random sequence is checked against a
 * brute-force model of the invariants.
 */
#include <check.h>
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "convindex.h"
#include "run_suite.h"

static struct convindex ix;

static void setup(void)
{
	convindex_init(&ix);
}

static void teardown(void)
{
	convindex_done(&ix);
}

static void id_of(unsigned n, uint8_t id[REC_KEY])
{
	memset(id, 0, REC_KEY);
	id[0] = (uint8_t)(n >> 8);
	id[1] = (uint8_t)n;
	id[15] = 0x5a;
}

static void put_session(unsigned n, const char *user, int64_t at)
{
	uint8_t id[REC_KEY];
	struct rec_session r = {user, strlen(user), at, "{}", 2};

	id_of(n, id);
	ck_assert_int_eq(convindex_put_session(&ix, id, &r), 0);
}

static void put_message(unsigned n, unsigned session, int64_t at,
			const char *text)
{
	uint8_t id[REC_KEY];
	struct rec_message r = {.role = ROLE_USER,
				.created_at = at,
				.content = text,
				.content_len = strlen(text),
				.meta = "{}",
				.meta_len = 2};

	id_of(n, id);
	id_of(session, r.session);
	ck_assert_int_eq(convindex_put_message(&ix, id, &r), 0);
}

static const struct conv_session *session(unsigned n)
{
	uint8_t id[REC_KEY];

	id_of(n, id);
	return convindex_session(&ix, id);
}

struct order {
	unsigned ids[64];
	int n;
};

static bool collect(void *ctx, const struct conv_session *s)
{
	struct order *o = ctx;

	o->ids[o->n++] = (unsigned)s->id[0] << 8 | s->id[1];
	return o->n < 64;
}

static struct order list(const char *user, const struct conv_session *after)
{
	struct order o = {{0}, 0};

	convindex_list(&ix, user, user ? strlen(user) : 0, after != NULL,
		       after ? after->updated_at : 0, after ? after->id : NULL,
		       collect, &o);
	return o;
}

static void expect(struct order o, const unsigned *want, int n)
{
	ck_assert_int_eq(o.n, n);
	for (int i = 0; i < n; i++)
		ck_assert_uint_eq(o.ids[i], want[i]);
}

START_TEST(activity_order)
{
	put_session(1, "ada", 100);
	put_session(2, "bob", 200);
	put_session(3, "ada", 300);
	expect(list(NULL, NULL), (unsigned[]){3, 2, 1}, 3);
	expect(list("ada", NULL), (unsigned[]){3, 1}, 2);
	expect(list("carol", NULL), NULL, 0);
	/* A message makes its session the most recent. */
	put_message(10, 1, 400, "hi");
	ck_assert(session(1)->updated_at == 400);
	ck_assert_uint_eq(session(1)->n_msgs, 1);
	expect(list(NULL, NULL), (unsigned[]){1, 3, 2}, 3);
	expect(list("ada", NULL), (unsigned[]){1, 3}, 2);
	/* A message older than the session's newest (a clock that went
	 * back) sits in time order and moves nothing. */
	put_message(11, 1, 350, "earlier");
	ck_assert(session(1)->updated_at == 400);
	ck_assert(memcmp(session(1)->msgs[0]->data, "earlier", 7) == 0);
	ck_assert(session(1)->msgs[0]->created_at == 350);
	/* After a cursor: the sessions past it. */
	expect(list(NULL, session(1)), (unsigned[]){3, 2}, 2);
	expect(list(NULL, session(2)), NULL, 0);
	expect(list("ada", session(3)), NULL, 0);
	/* Equal times: the higher id first. */
	put_session(4, "bob", 400);
	expect(list(NULL, NULL), (unsigned[]){4, 1, 3, 2}, 4);
	ck_assert_uint_eq(ix.n_sessions, 4);
	ck_assert_uint_eq(ix.n_messages, 2);
	ck_assert_uint_eq(ix.n_users, 2);
}
END_TEST

START_TEST(replace_and_delete)
{
	uint8_t id[REC_KEY];

	put_session(1, "ada", 100);
	put_message(10, 1, 110, "one");
	put_message(11, 1, 120, "two");
	/* New fields for the session: its messages stay, its user moves. */
	put_session(1, "bob", 100);
	ck_assert_uint_eq(session(1)->n_msgs, 2);
	ck_assert_str_eq(session(1)->user->name, "bob");
	ck_assert_uint_eq(ix.n_users, 1); /* ada had nothing left */
	expect(list("ada", NULL), NULL, 0);
	expect(list("bob", NULL), (unsigned[]){1}, 1);
	/* A message replaced: same id, new text. */
	put_message(11, 1, 120, "TWO");
	ck_assert_uint_eq(session(1)->n_msgs, 2);
	ck_assert_uint_eq(ix.n_messages, 2);
	ck_assert(memcmp(session(1)->msgs[1]->data, "TWO", 3) == 0);
	/* A message moved to another session. */
	put_session(2, "bob", 50);
	put_message(11, 2, 130, "moved");
	ck_assert_uint_eq(session(1)->n_msgs, 1);
	ck_assert_uint_eq(session(2)->n_msgs, 1);
	ck_assert(session(1)->updated_at == 110);
	ck_assert(session(2)->updated_at == 130);
	id_of(10, id);
	ck_assert(convindex_del_message(&ix, id));
	ck_assert(!convindex_del_message(&ix, id));
	ck_assert(session(1)->updated_at == 100);
	id_of(2, id);
	ck_assert(convindex_del_session(&ix, id));
	ck_assert(!convindex_del_session(&ix, id));
	id_of(11, id);
	ck_assert_ptr_null(convindex_message(&ix, id));
	ck_assert_uint_eq(ix.n_messages, 0);
	ck_assert_uint_eq(ix.n_sessions, 1);
	id_of(1, id);
	ck_assert(convindex_del_session(&ix, id));
	ck_assert_uint_eq(ix.n_users, 0);
	ck_assert_ptr_null(ix.head);
	ck_assert_uint_eq(ix.bytes, 0);
}
END_TEST

START_TEST(placeholders)
{
	/* Messages read before their session's record. */
	put_message(10, 1, 110, "a");
	put_message(11, 1, 120, "b");
	put_message(12, 2, 130, "c");
	ck_assert_uint_eq(ix.n_recovered, 2);
	ck_assert(session(1)->recovered);
	ck_assert_ptr_null(session(1)->user);
	put_session(1, "ada", 100);
	ck_assert(!session(1)->recovered);
	ck_assert(session(1)->updated_at == 120);
	ck_assert_uint_eq(ix.n_recovered, 1);
	/* The rest adopted by a user. */
	ck_assert_uint_eq(convindex_adopt_recovered(&ix, "unknown", 7), 1);
	ck_assert_uint_eq(ix.n_recovered, 0);
	ck_assert_str_eq(session(2)->user->name, "unknown");
	expect(list("unknown", NULL), (unsigned[]){2}, 1);
	expect(list(NULL, NULL), (unsigned[]){2, 1}, 2);
}
END_TEST

START_TEST(wire_forms)
{
	struct buf b = {0};
	json_t *j;
	uint8_t id[REC_KEY];
	struct rec_message r = {.role = ROLE_SYSTEM,
				.created_at = 1767225600123456,
				.content = "say \"hi\"\n",
				.content_len = 9,
				.meta = "{\"m\":1}",
				.meta_len = 7};
	struct rec_session rs = {"\xc3\xa9mile", 6, 1767225600000001,
				 "{\"t\":[1]}", 9};

	id_of(1, id);
	ck_assert_int_eq(convindex_put_session(&ix, id, &rs), 0);
	id_of(1, r.session);
	id_of(2, id);
	ck_assert_int_eq(convindex_put_message(&ix, id, &r), 0);
	ck_assert(conv_message_json(&b, convindex_message(&ix, id)));
	ck_assert_uint_le(b.len,
			  conv_message_json_max(convindex_message(&ix, id)));
	j = json_loads(b.data, 0, NULL);
	ck_assert_ptr_nonnull(j);
	ck_assert_str_eq(json_string_value(json_object_get(j, "id")),
			 "00020000-0000-0000-0000-00000000005a");
	ck_assert_str_eq(json_string_value(json_object_get(j, "session_id")),
			 "00010000-0000-0000-0000-00000000005a");
	ck_assert_str_eq(json_string_value(json_object_get(j, "role")),
			 "system");
	ck_assert_str_eq(json_string_value(json_object_get(j, "content")),
			 "say \"hi\"\n");
	ck_assert_str_eq(json_string_value(json_object_get(j, "created_at")),
			 "2026-01-01T00:00:00.123456Z");
	ck_assert_int_eq(json_integer_value(json_object_get(
				 json_object_get(j, "metadata"), "m")),
			 1);
	json_decref(j);
	b.len = 0;
	id_of(1, id);
	ck_assert(conv_session_json(&b, convindex_session(&ix, id)));
	j = json_loads(b.data, 0, NULL);
	ck_assert_ptr_nonnull(j);
	ck_assert_str_eq(json_string_value(json_object_get(j, "user_id")),
			 "\xc3\xa9mile");
	ck_assert_str_eq(json_string_value(json_object_get(j, "updated_at")),
			 "2026-01-01T00:00:00.123456Z");
	ck_assert_int_eq(
		json_integer_value(json_object_get(j, "message_count")), 1);
	json_decref(j);
	buf_done(&b);
}
END_TEST

/* A session's messages as a list: the single forms joined by commas,
 * content with and without escapes alike, within the bound. */
START_TEST(message_list)
{
	static const char *const texts[] = {"plain words", "tab\there",
					    "\x01\x1f\"\\", "\xc3\xa9t\xc3\xa9",
					    "x"};
	struct buf list = {0}, one = {0};
	struct rec_session rs = {"u", 1, 1, "{}", 2};
	const struct conv_session *s;
	uint8_t id[REC_KEY];

	id_of(1, id);
	ck_assert_int_eq(convindex_put_session(&ix, id, &rs), 0);
	for (unsigned i = 0; i < 5; i++) {
		struct rec_message r = {.role = ROLE_USER,
					.created_at = 10 + i,
					.content = texts[i],
					.content_len = strlen(texts[i]),
					.meta = "{}",
					.meta_len = 2};

		id_of(1, r.session);
		id_of(10 + i, id);
		ck_assert_int_eq(convindex_put_message(&ix, id, &r), 0);
	}
	s = session(1);
	ck_assert_uint_eq(s->n_msgs, 5);
	for (size_t from = 0; from < 5; from++) {
		size_t bound = 0;

		list.len = one.len = 0;
		ck_assert(conv_messages_json(&list, s, from, 5));
		for (size_t i = from; i < 5; i++) {
			ck_assert(i == from || buf_append(&one, ",", 1));
			ck_assert(conv_message_json(&one, s->msgs[i]));
			bound += conv_message_json_max(s->msgs[i]);
		}
		ck_assert_uint_eq(list.len, one.len);
		ck_assert(!memcmp(list.data, one.data, one.len));
		ck_assert_uint_le(list.len, bound);
	}
	/* Each content read back as it was stored. */
	list.len = 0;
	ck_assert(buf_append(&list, "[", 1) &&
		  conv_messages_json(&list, s, 0, 5) &&
		  buf_append(&list, "]", 1));
	{
		json_t *j = json_loads(list.data, 0, NULL);

		ck_assert_ptr_nonnull(j);
		ck_assert_uint_eq(json_array_size(j), 5);
		for (size_t i = 0; i < 5; i++)
			ck_assert_str_eq(
				json_string_value(json_object_get(
					json_array_get(j, i), "content")),
				texts[i]);
		json_decref(j);
	}
	buf_done(&list);
	buf_done(&one);
}
END_TEST

/* Random puts and deletes; after each, the invariants by brute force. */
START_TEST(random_against_invariants)
{
	uint64_t x = 12345;
	const char *users[] = {"u0", "u1", "u2"};

	for (int step = 0; step < 3000; step++) {
		unsigned a, b;
		uint8_t id[REC_KEY];

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		a = (unsigned)(x % 40);
		b = (unsigned)((x >> 8) % 7);
		switch ((x >> 20) % 5) {
		case 0:
			put_session(a, users[b % 3], (int64_t)(x >> 40) % 1000);
			break;
		case 1:
		case 2:
			put_message(100 + (unsigned)((x >> 12) % 300), a,
				    (int64_t)(x >> 36) % 2000, "m");
			break;
		case 3:
			id_of(a, id);
			convindex_del_session(&ix, id);
			break;
		default:
			id_of(100 + (unsigned)((x >> 12) % 300), id);
			convindex_del_message(&ix, id);
		}
		/* Global list sorted, counts add up, updated_at right. */
		size_t n = 0, msgs = 0;

		for (const struct conv_session *s = ix.head; s; s = s->next) {
			int64_t at = s->created_at;

			if (s->next)
				ck_assert(
					s->updated_at > s->next->updated_at ||
					(s->updated_at == s->next->updated_at &&
					 memcmp(s->id, s->next->id, REC_KEY) >
						 0));
			for (uint32_t i = 0; i < s->n_msgs; i++) {
				ck_assert_ptr_eq(s->msgs[i]->session, s);
				if (i)
					ck_assert(s->msgs[i - 1]->created_at <=
						  s->msgs[i]->created_at);
				if (s->msgs[i]->created_at > at)
					at = s->msgs[i]->created_at;
				ck_assert_ptr_eq(
					convindex_message(&ix, s->msgs[i]->id),
					s->msgs[i]);
			}
			ck_assert(s->updated_at == at);
			ck_assert_ptr_eq(convindex_session(&ix, s->id), s);
			msgs += s->n_msgs;
			n++;
		}
		ck_assert_uint_eq(n, ix.n_sessions);
		ck_assert_uint_eq(msgs, ix.n_messages);
		ck_assert_uint_eq(ix.sessions.n, n);
		ck_assert_uint_eq(ix.messages.n, msgs);
	}
}
END_TEST

static Suite *convindex_suite(void)
{
	Suite *s = suite_create("convindex");
	TCase *tc = tcase_create("conversations");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, activity_order);
	tcase_add_test(tc, replace_and_delete);
	tcase_add_test(tc, placeholders);
	tcase_add_test(tc, wire_forms);
	tcase_add_test(tc, message_list);
	tcase_add_test(tc, random_against_invariants);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return run_suite(convindex_suite());
}
