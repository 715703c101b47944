/*
 * Fuzz harness of protocol/idscan.c. The first input byte picks the size
 * of the pieces the rest is fed in (the bridge feeds what each read
 * gives). Oracles: the scan never fails whatever the bytes (what it
 * keeps from malformed input may not parse: the bridge then treats the
 * request as one without an id); and when the input is a JSON object
 * (parsed strictly, no duplicate keys), an id or method found is a JSON
 * string, number or null (the method a string) equal to the object's
 * member, and a scalar id or string method whose text is short is found.
 */
#include "fuzz.h"

#include "protocol/idscan.h"

#include <jansson.h>
#include <string.h>

/* Short enough that its text as written fits IDSCAN_VALUE_MAX even with
 * every character escaped as \uXXXX. */
#define SURELY_KEPT 40

static json_t *scanned(const char *text, size_t len)
{
	return text ? json_loadb(text, len, JSON_DECODE_ANY, NULL) : NULL;
}

static void check_member(const char *text, size_t len, json_t *obj,
			 const char *name, bool string_only)
{
	json_t *found = scanned(text, len);
	json_t *member = obj ? json_object_get(obj, name) : NULL;
	char *dump;

	if (!obj) {
		json_decref(found);
		return;
	}
	/* What the scan keeps is a JSON value of the allowed kinds. */
	if (text)
		FUZZ_CHECK(found && (json_is_string(found) ||
				     (!string_only && (json_is_number(found) ||
						       json_is_null(found)))));
	if (found)
		FUZZ_CHECK(member && json_equal(found, member));
	if (member && (json_is_string(member) ||
		       (!string_only &&
			(json_is_number(member) || json_is_null(member))))) {
		dump = json_dumps(member, JSON_ENCODE_ANY | JSON_COMPACT);
		if (dump && strlen(dump) <= SURELY_KEPT)
			FUZZ_CHECK(found != NULL);
		free(dump);
	}
	json_decref(found);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct idscan s;
	const char *text = (const char *)data + 1;
	size_t n, step, len;
	const char *id, *method;
	json_t *doc;

	if (size < 1)
		return 0;
	step = 1 + data[0] % 64;
	n = size - 1;
	idscan_init(&s);
	for (size_t i = 0; i < n; i += step)
		idscan_feed(&s, text + i, n - i < step ? n - i : step);
	doc = json_loadb(text, n, JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_object(doc)) {
		json_decref(doc);
		doc = NULL;
	}
	id = idscan_id(&s, &len);
	check_member(id, id ? len : 0, doc, "id", false);
	method = idscan_method(&s, &len);
	check_member(method, method ? len : 0, doc, "method", true);
	json_decref(doc);
	return 0;
}
