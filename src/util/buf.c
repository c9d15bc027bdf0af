#include "buf.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void buf_init(struct buf *b, size_t cap)
{
	b->data = NULL;
	b->len = 0;
	b->alloc = 0;
	b->cap = cap;
}

void buf_release(struct buf *b)
{
	free(b->data);
	buf_init(b, b->cap);
}

void buf_clear(struct buf *b)
{
	b->len = 0;
	if (b->data)
		b->data[0] = '\0';
}

/* Makes room for n more bytes plus the terminating NUL. */
static int buf_grow(struct buf *b, size_t n)
{
	if (n > b->cap || b->len > b->cap - n)
		return BUF_ETOOBIG;
	size_t need = b->len + n + 1;
	if (need <= b->alloc)
		return 0;
	size_t alloc = b->alloc ? b->alloc : 256;
	while (alloc < need)
		alloc = alloc > SIZE_MAX / 2 ? need : alloc * 2;
	char *p = realloc(b->data, alloc);
	if (!p)
		return BUF_ENOMEM;
	b->data = p;
	b->alloc = alloc;
	return 0;
}

int buf_reserve(struct buf *b, size_t n)
{
	return buf_grow(b, n);
}

int buf_add(struct buf *b, const void *p, size_t n)
{
	int rc = buf_grow(b, n);
	if (rc)
		return rc;
	if (n)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
	return 0;
}

int buf_adds(struct buf *b, const char *s)
{
	return buf_add(b, s, strlen(s));
}

int buf_add_str(struct buf *b, const char *s)
{
	return buf_add(b, s, strlen(s) + 1);
}

void buf_take_str(const unsigned char **at, char *out, size_t size)
{
	size_t n = strlen((const char *)*at);
	size_t k = n < size ? n : size - 1;
	memcpy(out, *at, k);
	out[k] = '\0';
	*at += n + 1;
}

int buf_addc(struct buf *b, char c)
{
	return buf_add(b, &c, 1);
}

int buf_vprintf(struct buf *b, const char *fmt, va_list ap)
{
	va_list cp;
	va_copy(cp, ap);
	char small[256];
	int n = vsnprintf(small, sizeof(small), fmt, cp);
	va_end(cp);
	if (n < 0)
		return BUF_ENOMEM;
	if ((size_t)n < sizeof(small))
		return buf_add(b, small, (size_t)n);
	int rc = buf_grow(b, (size_t)n);
	if (rc)
		return rc;
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	b->len += (size_t)n;
	return 0;
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = buf_vprintf(b, fmt, ap);
	va_end(ap);
	return rc;
}

int buf_add_quoted(struct buf *b, const char *s, size_t n)
{
	int rc = buf_grow(b, n + 2);
	if (rc)
		return rc;
	char *p = b->data + b->len;
	p[0] = '"';
	memcpy(p + 1, s, n);
	p[n + 1] = '"';
	b->len += n + 2;
	b->data[b->len] = '\0';
	return 0;
}

int buf_add_json_str(struct buf *b, const char *s)
{
	static const char hex[] = "0123456789abcdef";
	/* Most strings (node names) need no escaping: one reservation, one copy. */
	size_t plain = 0;
	while (s[plain] && (unsigned char)s[plain] >= 0x20 && s[plain] != '"' && s[plain] != '\\')
		plain++;
	if (!s[plain])
		return buf_add_quoted(b, s, plain);
	int rc = buf_addc(b, '"');
	const unsigned char *p = (const unsigned char *)s;
	while (!rc && *p) {
		/* Copy the longest run that needs no escaping in one go. */
		const unsigned char *run = p;
		while (*p >= 0x20 && *p != '"' && *p != '\\')
			p++;
		if (p > run)
			rc = buf_add(b, run, (size_t)(p - run));
		if (rc || !*p)
			break;
		char esc[6] = { '\\', 0 };
		size_t n = 2;
		switch (*p) {
		case '"': esc[1] = '"'; break;
		case '\\': esc[1] = '\\'; break;
		case '\n': esc[1] = 'n'; break;
		case '\r': esc[1] = 'r'; break;
		case '\t': esc[1] = 't'; break;
		default:
			esc[1] = 'u';
			esc[2] = '0';
			esc[3] = '0';
			esc[4] = hex[*p >> 4];
			esc[5] = hex[*p & 15];
			n = 6;
		}
		rc = buf_add(b, esc, n);
		p++;
	}
	return rc ? rc : buf_addc(b, '"');
}

const char *buf_cstr(struct buf *b)
{
	return b->data ? b->data : "";
}

char *buf_detach(struct buf *b, size_t *len)
{
	char *p = b->data;
	if (len)
		*len = b->len;
	if (!p)
		p = calloc(1, 1);
	buf_init(b, b->cap);
	return p;
}

int buf_read_file(struct buf *b, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
		return -1;
	}
	char chunk[65536];
	size_t n;
	int rc = 0;
	while (!rc && (n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		rc = buf_add(b, chunk, n);
	bool failed = ferror(f);
	fclose(f);
	if (!rc && !failed)
		return 0;
	if (rc == BUF_ETOOBIG)
		snprintf(err, errlen, "%s: larger than %zu bytes", path, b->cap);
	else
		snprintf(err, errlen, "%s: %s", path, rc ? "out of memory" : "read error");
	return -1;
}
