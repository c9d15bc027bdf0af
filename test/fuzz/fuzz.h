/*
 * Helpers the libFuzzer targets share (header only: each target stays one
 * file). How the targets are built and run: docs/testing.md.
 */
#ifndef GPU_FUZZ_H
#define GPU_FUZZ_H

#include "buf.h"
#include "httpd.h"
#include "log.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The input as a NUL-terminated string (the server and the file readers give parsers one). */
static inline char *fuzz_cstr(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);
	if (!s)
		abort();
	memcpy(s, data, size);
	s[size] = '\0';
	return s;
}

/* Warnings about malformed input would be most of the output; errors still show. */
static inline void fuzz_quiet(void)
{
	log_setup(LOG_ERROR, false);
}

/*
 * One temporary file per process, rewritten with each input, for readers
 * that take a path (kubeconfig, inventory). Removed at exit.
 */
static char fuzz_path_[64];

static void fuzz_file_remove(void)
{
	unlink(fuzz_path_);
}

static inline const char *fuzz_file(const uint8_t *data, size_t size)
{
	if (!fuzz_path_[0]) {
		snprintf(fuzz_path_, sizeof(fuzz_path_), "/tmp/gpu-fuzz.XXXXXX");
		int fd = mkstemp(fuzz_path_);
		if (fd < 0)
			abort();
		close(fd);
		atexit(fuzz_file_remove);
	}
	FILE *f = fopen(fuzz_path_, "wb");
	if (!f || fwrite(data, 1, size, f) != size || fclose(f))
		abort();
	return fuzz_path_;
}

/*
 * Calls an HTTP handler as the server does (NUL-terminated body, the
 * server's response cap) and checks what every handler promises: the
 * reply, error or not, is JSON. Returns the reply parsed (caller deletes).
 */
static inline cJSON *fuzz_handler(http_handler h, void *ctx, const char *body, size_t len)
{
	struct http_request req = { "POST", "/", body, len, NULL };
	struct http_response resp = { .status = 200 };
	buf_init(&resp.body, 64u << 20);
	h(ctx, &req, &resp);
	cJSON *reply = cJSON_ParseWithLength(resp.body.data ? resp.body.data : "", resp.body.len);
	if (!reply) {
		fprintf(stderr, "HTTP %d reply is not JSON: %.*s\n", resp.status, (int)resp.body.len,
			resp.body.data ? resp.body.data : "");
		abort();
	}
	buf_release(&resp.body);
	return reply;
}

#endif
