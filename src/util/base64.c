#include "base64.h"

#include <ctype.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

int base64_decode(const char *text, struct buf *out)
{
	/* EVP_DecodeBlock wants no whitespace and a length that is a multiple of 4. */
	size_t n = strlen(text), k = 0, pad = 0;
	char *clean = malloc(n + 1);
	if (!clean)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (!isspace((unsigned char)text[i]))
			clean[k++] = text[i];
	clean[k] = '\0';
	int rc = -1;
	if (k % 4 == 0) {
		for (size_t i = k; i > 0 && clean[i - 1] == '='; i--)
			pad++;
		unsigned char *raw = malloc(k / 4 * 3 + 1);
		int got = raw ? EVP_DecodeBlock(raw, (const unsigned char *)clean, (int)k) : -1;
		if (got >= 0 && (size_t)got >= pad)
			rc = buf_add(out, raw, (size_t)got - pad);
		free(raw);
	}
	free(clean);
	return rc ? -1 : 0;
}

int base64_encode(const void *data, size_t len, struct buf *out)
{
	size_t need = (len + 2) / 3 * 4;
	unsigned char *enc = malloc(need + 1);
	if (!enc)
		return -1;
	int got = EVP_EncodeBlock(enc, data, (int)len);
	int rc = got < 0 ? -1 : buf_add(out, enc, (size_t)got);
	free(enc);
	return rc;
}
