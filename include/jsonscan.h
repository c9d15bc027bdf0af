/*
 * jsonscan: a validating JSON scanner that allocates nothing, for the one
 * big value on the hot path: ExtenderArgs.NodeNames, thousands of strings
 * that cJSON would turn into thousands of nodes (about a quarter of a
 * 5000-node filter+prioritize; see docs/performance.md). It walks an
 * object's members or an array's elements, skips any value after checking
 * that it is JSON (RFC 8259: UTF-8, nesting up to JSONSCAN_MAX_DEPTH), and
 * decodes strings. Everything else still goes through cJSON.
 */
#ifndef GPU_JSONSCAN_H
#define GPU_JSONSCAN_H

#include <stdbool.h>
#include <stddef.h>

#define JSONSCAN_MAX_DEPTH 1000   /* as cJSON's nesting limit */

struct jsonscan {
	const char *p, *end;   /* the text not read yet */
};

/* A string literal as it stands in the text, quotes included. */
struct json_str {
	const char *raw;
	size_t raw_len;
	bool escaped;          /* holds a backslash escape */
};

/* The first character of the next value (blanks skipped), 0 at the end of the text. */
char jsonscan_peek(struct jsonscan *s);

/* Reads one string literal. 0, or -1 when the next value is not a valid one. */
int jsonscan_string(struct jsonscan *s, struct json_str *out);

/* Skips one value of any kind, checking it. 0, or -1 on invalid JSON. */
int jsonscan_skip(struct jsonscan *s);

/* Enters the object ('{') or array ('[') that comes next. 0, or -1 when it is not one. */
int jsonscan_open(struct jsonscan *s, char open);

/*
 * Moves to the next element of the container entered with open; *seen
 * counts the elements so far (start it at 0). Returns 1 with s at the
 * element's value (for an object, *key set to the member's name), 0 after
 * the closing bracket, -1 on invalid JSON. Each value must be read or
 * skipped before the next call.
 */
int jsonscan_next(struct jsonscan *s, char open, int *seen, struct json_str *key);

/* True when only blanks are left. */
bool jsonscan_at_end(struct jsonscan *s);

/*
 * Decodes a literal into out, which needs room for str->raw_len bytes (a
 * decoded string and its NUL are never longer than the literal; out may be
 * str->raw + 1, decoding in place). Returns
 * the length, or -1 for an escape that names no character (a lone UTF-16
 * surrogate).
 */
long json_str_decode(const struct json_str *str, char *out);

/* Whether the literal spells word, ignoring ASCII case (as Go's encoding/json matches keys). */
bool json_str_ieq(const struct json_str *str, const char *word);

#endif
