/*
 * buf: one growable byte buffer with a hard size cap, used for every request
 * body and every reply we build. Appending past the cap fails instead of
 * allocating, so oversized input is an error, never a memory spike.
 */
#ifndef GPU_BUF_H
#define GPU_BUF_H

#include <stdarg.h>
#include <stddef.h>

struct buf {
	char *data;    /* always NUL-terminated when len > 0 or after buf_cstr() */
	size_t len;
	size_t alloc;
	size_t cap;    /* the most bytes this buffer may ever hold */
};

#define BUF_ENOMEM (-1)
#define BUF_ETOOBIG (-2)

/* Starts an empty buffer that may grow to cap bytes. Allocates nothing yet. */
void buf_init(struct buf *b, size_t cap);
/* Frees the memory and returns the buffer to its initial, empty state. */
void buf_release(struct buf *b);
/* Forgets the content, keeps the memory. */
void buf_clear(struct buf *b);

/* Makes room for n more bytes in one allocation (a reply's known size). Same returns as buf_add. */
int buf_reserve(struct buf *b, size_t n);

/* Each returns 0, BUF_ETOOBIG when the cap would be passed, or BUF_ENOMEM. */
int buf_add(struct buf *b, const void *p, size_t n);
int buf_adds(struct buf *b, const char *s);
int buf_addc(struct buf *b, char c);
int buf_printf(struct buf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
int buf_vprintf(struct buf *b, const char *fmt, va_list ap)
	__attribute__((format(printf, 2, 0)));
/*
 * Packed records (ledgers, claims): buf_add_str appends s with its NUL;
 * buf_take_str reads one back at *at into out (cut to size) and steps past it.
 */
int buf_add_str(struct buf *b, const char *s);
void buf_take_str(const unsigned char **at, char *out, size_t size);
/* Appends s as a JSON string literal, quotes included. */
int buf_add_json_str(struct buf *b, const char *s);
/* Appends s[0, n) in quotes, for a string known to need no JSON escaping. */
int buf_add_quoted(struct buf *b, const char *s, size_t n);

/*
 * Appends the whole file at path (within the cap). 0, or -1 with "PATH: why"
 * in err: cannot open, larger than the cap, read error.
 */
int buf_read_file(struct buf *b, const char *path, char *err, size_t errlen);

/* The content as a C string (never NULL; "" when empty). */
const char *buf_cstr(struct buf *b);
/* Hands the heap block to the caller (who frees it) and empties the buffer. */
char *buf_detach(struct buf *b, size_t *len);

#endif
