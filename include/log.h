/*
 * log: structured, line-oriented logging to stderr. Each line is either
 * logfmt ("ts=... level=info msg=\"...\" key=value") or one JSON object,
 * chosen once at start. Safe to call from any thread.
 */
#ifndef GPU_LOG_H
#define GPU_LOG_H

#include <stdbool.h>
#include <stddef.h>

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };

void log_setup(enum log_level min, bool json);
/* Parses "debug|info|warn|error"; returns false on anything else. */
bool log_level_parse(const char *s, enum log_level *out);
bool log_enabled(enum log_level lvl);

/*
 * msg is the human message; kv is an optional, already formatted list of
 * key=value pairs (printf format), e.g. log_msg(LOG_INFO, "bound", "pod=%s", p).
 */
void log_msg(enum log_level lvl, const char *msg, const char *kvfmt, ...)
	__attribute__((format(printf, 3, 4)));

/*
 * s with '"' and '\\' escaped, for a quoted value (API server messages
 * quote names). LOG_Q gives it a buffer that lives for the enclosing call:
 *   log_warn("bind refused", "reason=\"%s\"", LOG_Q(err));
 */
const char *log_quote(const char *s, char *out, size_t size);
#define LOG_Q(s) log_quote((s), (char[1024]){ 0 }, 1024)

#define log_debug(msg, ...) do { if (log_enabled(LOG_DEBUG)) log_msg(LOG_DEBUG, msg, __VA_ARGS__); } while (0)
#define log_info(msg, ...) log_msg(LOG_INFO, msg, __VA_ARGS__)
#define log_warn(msg, ...) log_msg(LOG_WARN, msg, __VA_ARGS__)
#define log_error(msg, ...) log_msg(LOG_ERROR, msg, __VA_ARGS__)

#endif
