/* Shared text helpers of the agent's parsers. */
#include "text.h"
#include "agent.h"

#include "strnum.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

const char *agent_text_line(const char **p, size_t *len)
{
	const char *s = *p;
	if (!s || !*s)
		return NULL;
	const char *nl = strchr(s, '\n');
	size_t n = nl ? (size_t)(nl - s) : strlen(s);
	*p = nl ? nl + 1 : s + n;
	if (n > 0 && s[n - 1] == '\r')
		n--;
	*len = n;
	return s;
}

static bool blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

char *agent_text_copy(char *dst, size_t size, const char *s, size_t n)
{
	if (!size)
		return dst;
	while (n > 0 && blank(*s)) {
		s++;
		n--;
	}
	while (n > 0 && blank(s[n - 1]))
		n--;
	if (n >= size)
		n = size - 1;
	memcpy(dst, s, n);
	dst[n] = '\0';
	return dst;
}

char *agent_text_trim(char *s)
{
	size_t n = strlen(s);
	size_t i = 0;
	while (i < n && blank(s[i]))
		i++;
	while (n > i && blank(s[n - 1]))
		n--;
	memmove(s, s + i, n - i);
	s[n - i] = '\0';
	return s;
}

bool agent_text_ieq(const char *a, const char *b)
{
	return !strcasecmp(a, b);
}

bool agent_text_iprefix(const char *s, const char *prefix)
{
	return !strncasecmp(s, prefix, strlen(prefix));
}

const char *agent_text_ifind(const char *s, size_t n, const char *needle)
{
	size_t m = strlen(needle);
	if (!m)
		return s;
	for (size_t i = 0; i + m <= n; i++) {
		if (!strncasecmp(s + i, needle, m))
			return s + i;
	}
	return NULL;
}

bool agent_text_u64(const char *s, uint64_t *out, const char **end)
{
	char digits[24];
	size_t n = 0;
	while (isdigit((unsigned char)s[n])) {
		if (n + 1 >= sizeof(digits))
			return false;
		digits[n] = s[n];
		n++;
	}
	if (!n)
		return false;
	digits[n] = '\0';
	int64_t v;
	if (!strnum_i64(digits, &v) || v < 0)
		return false;
	*out = (uint64_t)v;
	if (end)
		*end = s + n;
	return true;
}

bool agent_text_double(const char *s, double *out, const char **end)
{
	char num[48];
	size_t n = 0;
	bool dot = false;
	while (isdigit((unsigned char)s[n]) || (s[n] == '.' && !dot)) {
		if (s[n] == '.')
			dot = true;
		if (n + 1 >= sizeof(num))
			return false;
		num[n] = s[n];
		n++;
	}
	if (!n || !isdigit((unsigned char)num[0]) || num[n - 1] == '.')
		return false;
	num[n] = '\0';
	if (!strnum_double(num, out))
		return false;
	if (end)
		*end = s + n;
	return true;
}

unsigned agent_text_hex(const char *s, int max, const char **end)
{
	unsigned v = 0;
	int n = 0;
	while (n < max && isxdigit((unsigned char)s[n])) {
		int c = tolower((unsigned char)s[n]);
		v = v * 16 + (unsigned)(isdigit(c) ? c - '0' : c - 'a' + 10);
		n++;
	}
	if (end)
		*end = s + n;
	return v;
}

bool agent_text_complete(const char *text)
{
	size_t n = strlen(text);
	return n == 0 || text[n - 1] == '\n';
}

bool agent_text_binary(const char *text)
{
	for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
		if ((*p < 0x20 && *p != '\n' && *p != '\r' && *p != '\t') || *p == 0x7f)
			return true;
	}
	return false;
}

bool agent_text_usable(const char *text, bool whole_lines, char *err, size_t errlen)
{
	if (!text || agent_text_binary(text)) {
		agent_text_err(err, errlen, "output is not text");
		return false;
	}
	if (whole_lines && !agent_text_complete(text)) {
		agent_text_err(err, errlen, "output ends in the middle of a line (cut short?)");
		return false;
	}
	return true;
}

const char *agent_text_json(const char *text)
{
	while (isspace((unsigned char)*text))
		text++;
	return *text == '{' ? text : NULL;
}

cJSON *agent_text_json_object(const char *text, char *err, size_t errlen)
{
	cJSON *root = cJSON_Parse(text);
	if (!root || !cJSON_IsObject(root)) {
		cJSON_Delete(root);
		agent_text_err(err, errlen, "JSON output does not parse");
		return NULL;
	}
	return root;
}

void agent_text_clean(char *s)
{
	for (; *s; s++) {
		if (*s == '"')
			*s = '\'';
		else if ((unsigned char)*s < 0x20)
			*s = ' ';
	}
}

void agent_text_err(char *err, size_t errlen, const char *fmt, ...)
{
	if (!err || !errlen)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

int agent_text_words(const char *line, size_t n, char tok[][16], int max)
{
	int k = 0;
	size_t i = 0;
	while (i < n) {
		while (i < n && (line[i] == ' ' || line[i] == '\t'))
			i++;
		if (i >= n)
			break;
		size_t start = i;
		while (i < n && line[i] != ' ' && line[i] != '\t')
			i++;
		if (k >= max)
			return max + 1;
		agent_text_copy(tok[k], sizeof(tok[0]), line + start, i - start);
		k++;
	}
	return k;
}

int agent_text_gpu_label(const char *t)
{
	int v;
	if (strncmp(t, "GPU", 3) || !isdigit((unsigned char)t[3]))
		return -1;
	return strnum_int(t + 3, 0, AGENT_MAX_GPUS - 1, &v) ? v : -1;
}
