/*
 * text: small helpers the agent's parsers share (line iteration, trimming,
 * checked number prefixes, JSON), and the cleaning of tool text for log
 * lines. Private to src/agent.
 */
#ifndef GPU_AGENT_TEXT_H
#define GPU_AGENT_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * The next line of the text at *p: returns its start and sets *len (line
 * ending excluded, "\r\n" too) and moves *p past it; NULL at the end.
 */
const char *agent_text_line(const char **p, size_t *len);

/* Copies s[0, n) without leading/trailing blanks into dst[size] (cut to fit). */
char *agent_text_copy(char *dst, size_t size, const char *s, size_t n);

/* Trims blanks at both ends, in place. */
char *agent_text_trim(char *s);

/* Case-insensitive equality and prefix test. */
bool agent_text_ieq(const char *a, const char *b);
bool agent_text_iprefix(const char *s, const char *prefix);
/* Case-insensitive substring search in s[0, n); NULL when absent. */
const char *agent_text_ifind(const char *s, size_t n, const char *needle);

/*
 * The unsigned decimal number at the start of s ("81559 MiB",
 * "67092480(0x3ffc000) KB"), checked with strnum: false when s does not
 * start with a digit or the number overflows. *end (optional) is set past
 * the digits.
 */
bool agent_text_u64(const char *s, uint64_t *out, const char **end);

/* A decimal number with an optional fraction ("32768.00"), false otherwise. */
bool agent_text_double(const char *s, double *out, const char **end);

/*
 * The hex digits at the start of s, at most max of them ("56a0]" -> 0x56a0),
 * 0 when there are none. *end (optional) is set past the digits.
 */
unsigned agent_text_hex(const char *s, int max, const char **end);

/* True when the text is empty or its last byte is a newline. */
bool agent_text_complete(const char *text);

/* True when the text holds bytes no tool prints (NUL aside: controls, 0x7f). */
bool agent_text_binary(const char *text);

/*
 * The blank-separated words of line[0, n) into tok (each cut to 15
 * characters): their number, or max + 1 when there are more than max.
 */
int agent_text_words(const char *line, size_t n, char tok[][16], int max);

/* "GPU12" -> 12 (a topology matrix label); -1 when t is not one. */
int agent_text_gpu_label(const char *t);

/*
 * Whether a tool's output can be parsed: false, with the reason in err, when
 * it is NULL or binary, or (whole_lines) ends in the middle of a line.
 */
bool agent_text_usable(const char *text, bool whole_lines, char *err, size_t errlen);

/* The output's opening '{' when it is a JSON document (blanks before it), else NULL. */
const char *agent_text_json(const char *text);

struct cJSON;
/* The JSON object in text (the caller deletes it), or NULL with the reason in err. */
struct cJSON *agent_text_json_object(const char *text, char *err, size_t errlen);

/* Tool text made fit for a quoted log value: double quotes become single, control bytes blanks. */
void agent_text_clean(char *s);

/* snprintf into err, tolerating a NULL or empty buffer. */
void agent_text_err(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
