#include "jsonscan.h"

#include <stdint.h>
#include <string.h>
#include <strings.h>

static void skip_blanks(struct jsonscan *s)
{
	while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t'))
		s->p++;
}

char jsonscan_peek(struct jsonscan *s)
{
	skip_blanks(s);
	return s->p < s->end ? *s->p : 0;
}

bool jsonscan_at_end(struct jsonscan *s)
{
	skip_blanks(s);
	return s->p == s->end;
}

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* The four hex digits at p as a number, or -1. */
static long hex4(const char *p)
{
	long v = 0;
	for (int i = 0; i < 4; i++) {
		int d = hex_digit(p[i]);
		if (d < 0)
			return -1;
		v = v << 4 | d;
	}
	return v;
}

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/*
 * Bit 7 of each byte of w that ends or escapes a string, is a control
 * character ('"', '\\', below 0x20) or is not ASCII (UTF-8 to check), by
 * the classic "has a zero byte" test on w ^ '"', w ^ '\\' and "has a byte
 * below 0x20", and bit 7 itself. Bits above the lowest may be false alarms;
 * the lowest is exact (borrows only run upwards).
 */
static inline uint64_t special_bytes(uint64_t w)
{
	uint64_t q = w ^ (ONES * '"'), b = w ^ (ONES * '\\');
	return ((q - ONES) & ~q & HIGHS) | ((b - ONES) & ~b & HIGHS) | ((w - ONES * 0x20) & ~w & HIGHS) |
	       (w & HIGHS);
}

/* The next byte at or after p that ends or escapes a string, or end. */
static const char *next_special(const char *p, const char *end)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	/* Eight bytes a step: names are mostly plain. */
	for (; end - p >= 8; p += 8) {
		uint64_t w;
		memcpy(&w, p, 8);
		uint64_t m = special_bytes(w);
		if (m)
			return p + __builtin_ctzll(m) / 8;
	}
#endif
	while (p < end && (unsigned char)*p >= 0x20 && (unsigned char)*p < 0x80 && *p != '"' && *p != '\\')
		p++;
	return p;
}

/* The length of the well-formed UTF-8 sequence at p (a byte >= 0x80), or 0. */
static int utf8_sequence(const unsigned char *p, const unsigned char *end)
{
	int n;
	uint32_t cp, least;
	if (*p >= 0xc2 && *p <= 0xdf) {
		n = 2, cp = *p & 0x1f, least = 0x80;
	} else if ((*p & 0xf0) == 0xe0) {
		n = 3, cp = *p & 0x0f, least = 0x800;
	} else if (*p >= 0xf0 && *p <= 0xf4) {
		n = 4, cp = *p & 0x07, least = 0x10000;
	} else {
		return 0;
	}
	if (end - p < n)
		return 0;
	for (int i = 1; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (p[i] & 0x3f);
	}
	/* No overlong forms, no surrogates, nothing past U+10FFFF. */
	return cp < least || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) ? 0 : n;
}

int jsonscan_string(struct jsonscan *s, struct json_str *out)
{
	if (jsonscan_peek(s) != '"')
		return -1;
	const char *start = s->p, *p = s->p + 1, *end = s->end;
	bool escaped = false;
	for (;;) {
		p = next_special(p, end);
		if (p >= end)
			return -1;
		if (*p == '"')
			break;
		if ((unsigned char)*p >= 0x80) {
			int n = utf8_sequence((const unsigned char *)p, (const unsigned char *)end);
			if (!n)
				return -1;   /* not UTF-8: JSON text must be */
			p += n;
			continue;
		}
		if (*p != '\\')
			return -1;   /* a control character */
		escaped = true;
		if (end - p < 2)
			return -1;
		switch (p[1]) {
		case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
			p += 2;
			break;
		case 'u':
			if (end - p < 6 || hex4(p + 2) < 0)
				return -1;
			p += 6;
			break;
		default:
			return -1;
		}
	}
	out->raw = start;
	out->raw_len = (size_t)(p + 1 - start);
	out->escaped = escaped;
	s->p = p + 1;
	return 0;
}

static bool is_digit(const char *p, const char *end)
{
	return p < end && *p >= '0' && *p <= '9';
}

/* -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int scan_number(struct jsonscan *s)
{
	const char *p = s->p, *end = s->end;
	if (p < end && *p == '-')
		p++;
	if (!is_digit(p, end))
		return -1;
	if (*p == '0')
		p++;
	else
		while (is_digit(p, end))
			p++;
	if (p < end && *p == '.') {
		if (!is_digit(++p, end))
			return -1;
		while (is_digit(p, end))
			p++;
	}
	if (p < end && (*p == 'e' || *p == 'E')) {
		p++;
		if (p < end && (*p == '+' || *p == '-'))
			p++;
		if (!is_digit(p, end))
			return -1;
		while (is_digit(p, end))
			p++;
	}
	s->p = p;
	return 0;
}

static int scan_word(struct jsonscan *s, const char *word)
{
	size_t n = strlen(word);
	if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n))
		return -1;
	s->p += n;
	return 0;
}

/* A scalar (string, number, true, false, null). */
static int scan_scalar(struct jsonscan *s, char c)
{
	struct json_str str;
	switch (c) {
	case '"':
		return jsonscan_string(s, &str);
	case 't':
		return scan_word(s, "true");
	case 'f':
		return scan_word(s, "false");
	case 'n':
		return scan_word(s, "null");
	default:
		return c == '-' || (c >= '0' && c <= '9') ? scan_number(s) : -1;
	}
}

/* Past the member name and its colon. */
static int scan_key(struct jsonscan *s, struct json_str *key)
{
	if (jsonscan_string(s, key) || jsonscan_peek(s) != ':')
		return -1;
	s->p++;
	return 0;
}

int jsonscan_open(struct jsonscan *s, char open)
{
	if (jsonscan_peek(s) != open)
		return -1;
	s->p++;
	return 0;
}

int jsonscan_next(struct jsonscan *s, char open, int *seen, struct json_str *key)
{
	char c = jsonscan_peek(s);
	if (c == (open == '{' ? '}' : ']')) {
		s->p++;
		return 0;
	}
	if (*seen) {
		if (c != ',')
			return -1;
		s->p++;
	}
	struct json_str unused;
	if (open == '{' && scan_key(s, key ? key : &unused))
		return -1;
	if (!jsonscan_peek(s))
		return -1;
	(*seen)++;
	return 1;
}

/*
 * Iterative, so no input can run the stack out: one byte per open
 * container, '{' or '['.
 */
int jsonscan_skip(struct jsonscan *s)
{
	char stack[JSONSCAN_MAX_DEPTH];
	int depth = 0;
	bool want_value = true;
	for (;;) {
		if (want_value) {
			char c = jsonscan_peek(s);
			if (c == '{' || c == '[') {
				if (depth == JSONSCAN_MAX_DEPTH)
					return -1;
				stack[depth++] = c;
				s->p++;
				char close = c == '{' ? '}' : ']';
				if (jsonscan_peek(s) == close) {
					s->p++;
					depth--;
					want_value = false;
				} else if (c == '{') {
					struct json_str key;
					if (scan_key(s, &key))
						return -1;
				}
				continue;
			}
			if (scan_scalar(s, c))
				return -1;
			want_value = false;
		}
		if (!depth)
			return 0;
		char open = stack[depth - 1], c = jsonscan_peek(s);
		if (c == (open == '{' ? '}' : ']')) {
			s->p++;
			depth--;
			continue;
		}
		if (c != ',')
			return -1;
		s->p++;
		if (open == '{') {
			struct json_str key;
			if (scan_key(s, &key))
				return -1;
		}
		want_value = true;
	}
}

/* Writes code point cp as UTF-8; returns the bytes written. */
static int put_utf8(char *out, uint32_t cp)
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xc0 | cp >> 6);
		out[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xe0 | cp >> 12);
		out[1] = (char)(0x80 | (cp >> 6 & 0x3f));
		out[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	out[0] = (char)(0xf0 | cp >> 18);
	out[1] = (char)(0x80 | (cp >> 12 & 0x3f));
	out[2] = (char)(0x80 | (cp >> 6 & 0x3f));
	out[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

long json_str_decode(const struct json_str *str, char *out)
{
	const char *p = str->raw + 1, *end = str->raw + str->raw_len - 1;
	if (!str->escaped) {
		size_t n = (size_t)(end - p);
		memmove(out, p, n);
		out[n] = '\0';
		return (long)n;
	}
	char *o = out;
	while (p < end) {
		if (*p != '\\') {
			*o++ = *p++;
			continue;
		}
		char e = p[1];
		p += 2;
		switch (e) {
		case 'b': *o++ = '\b'; break;
		case 'f': *o++ = '\f'; break;
		case 'n': *o++ = '\n'; break;
		case 'r': *o++ = '\r'; break;
		case 't': *o++ = '\t'; break;
		case 'u': {
			/* The literal was checked: four hex digits follow. */
			uint32_t cp = (uint32_t)hex4(p);
			p += 4;
			if (cp >= 0xdc00 && cp <= 0xdfff)
				return -1;
			if (cp >= 0xd800 && cp <= 0xdbff) {
				long lo = end - p >= 6 && p[0] == '\\' && p[1] == 'u' ? hex4(p + 2) : -1;
				if (lo < 0xdc00 || lo > 0xdfff)
					return -1;
				cp = 0x10000 + ((cp - 0xd800) << 10) + ((uint32_t)lo - 0xdc00);
				p += 6;
			}
			o += put_utf8(o, cp);
			break;
		}
		default:
			*o++ = e;   /* '"', '\\', '/' */
		}
	}
	*o = '\0';
	return (long)(o - out);
}

bool json_str_ieq(const struct json_str *str, const char *word)
{
	char buf[64];
	if (str->raw_len > sizeof(buf))
		return false;
	long n = json_str_decode(str, buf);
	return n >= 0 && (size_t)n == strlen(word) && !strncasecmp(buf, word, (size_t)n);
}
