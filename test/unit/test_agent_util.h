/*
 * Helpers for the agent's unit tests: reading the recorded tool outputs
 * under test/fixtures/agent, and writing fake tools (shell scripts that
 * print those outputs) into a temporary directory for the detectors.
 *
 * Tests run from the repository root (make unit); AGENT_FIXTURES overrides
 * the fixture directory.
 */
#ifndef GPU_TEST_AGENT_UTIL_H
#define GPU_TEST_AGENT_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static inline const char *ta_fixture_dir(void)
{
	const char *d = getenv("AGENT_FIXTURES");
	return d && *d ? d : "test/fixtures/agent";
}

/* The fixture's full path into buf. */
static inline const char *ta_path(char *buf, size_t len, const char *rel)
{
	snprintf(buf, len, "%s/%s", ta_fixture_dir(), rel);
	return buf;
}

/* The fixture's absolute path (scripts run from another directory). */
static inline const char *ta_abs(char *buf, size_t len, const char *rel)
{
	const char *d = ta_fixture_dir();
	if (d[0] == '/') {
		snprintf(buf, len, "%s/%s", d, rel);
	} else {
		char cwd[512];
		if (!getcwd(cwd, sizeof(cwd)))
			fail_msg("getcwd: %s", strerror(errno));
		snprintf(buf, len, "%s/%s/%s", cwd, d, rel);
	}
	return buf;
}

/* Reads a fixture (relative to the fixture dir); fails the test when missing. */
static inline char *ta_read(const char *rel)
{
	char path[1024];
	ta_path(path, sizeof(path), rel);
	FILE *f = fopen(path, "rb");
	if (!f)
		fail_msg("cannot open fixture %s: %s", path, strerror(errno));
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *b = malloc((size_t)n + 1);
	assert_non_null(b);
	assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
	b[n] = '\0';
	fclose(f);
	return b;
}

/*
 * Defines "static type *name(const char *rel, int want_rc, char *err)":
 * a fresh zeroed type filled by parse(fixture text, out, err, 256), the
 * test failing unless parse returned want_rc. The caller frees it.
 */
#define TA_FIXTURE_PARSER(name, type, parse)                                     \
	static type *name(const char *rel, int want_rc, char *err)              \
	{                                                                        \
		type *out = calloc(1, sizeof(*out));                             \
		assert_non_null(out);                                            \
		char *text = ta_read(rel);                                       \
		int rc = parse(text, out, err, 256);                             \
		if (rc != want_rc)                                               \
			fail_msg("%s: rc %d (%s), want %d", rel, rc, err, want_rc); \
		free(text);                                                      \
		return out;                                                      \
	}

/* Replaces the first occurrence of from in a heap string (for deliberate garbling). */
static inline char *ta_replace(char *s, const char *from, const char *to)
{
	char *at = strstr(s, from);
	assert_non_null(at);
	size_t pre = (size_t)(at - s), fl = strlen(from), tl = strlen(to), rest = strlen(at + fl);
	char *r = malloc(pre + tl + rest + 1);
	assert_non_null(r);
	memcpy(r, s, pre);
	memcpy(r + pre, to, tl);
	memcpy(r + pre + tl, at + fl, rest + 1);
	free(s);
	return r;
}

/* A fresh temporary directory for fake tools. */
static inline char *ta_tmpdir(void)
{
	char tmpl[] = "/tmp/agent-test-XXXXXX";
	char *d = mkdtemp(tmpl);
	assert_non_null(d);
	return strdup(d);
}

/* Writes an executable shell script dir/name with the given body. */
static inline void ta_script(const char *dir, const char *name, const char *fmt, ...)
{
	char path[1024];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs("#!/bin/sh\n", f);
	va_list ap;
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	fclose(f);
	assert_int_equal(chmod(path, 0755), 0);
}

/* A fake tool dir/name that prints the fixture rel. */
static inline void ta_cat(const char *dir, const char *name, const char *rel)
{
	char path[1024];
	ta_script(dir, name, "cat '%s'\n", ta_abs(path, sizeof(path), rel));
}

/* Removes a fake tool (the vendor's tools "uninstalled"). */
static inline void ta_unlink(const char *dir, const char *name)
{
	char path[1024];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	unlink(path);
}

/* rm -r of a tmp dir made by ta_tmpdir (flat: only files inside). */
static inline void ta_rmdir(char *dir)
{
	static const char *const tools[] = { "nvidia-smi", "rocminfo", "rocm-smi", "clinfo", "xpu-smi",
					     "tool", "hang", "big", "pidfile" };
	for (size_t i = 0; i < sizeof(tools) / sizeof(tools[0]); i++)
		ta_unlink(dir, tools[i]);
	rmdir(dir);
	free(dir);
}

#endif
