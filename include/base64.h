/* base64: standard-alphabet encoding (OpenSSL underneath) for kubeconfig data and JSON patches. */
#ifndef GPU_BASE64_H
#define GPU_BASE64_H

#include "buf.h"

#include <stddef.h>

/* Decodes text (whitespace allowed) into out; -1 on invalid input. */
int base64_decode(const char *text, struct buf *out);
/* Appends the encoding of len bytes to out. */
int base64_encode(const void *data, size_t len, struct buf *out);

#endif
