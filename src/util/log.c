#include "log.h"
#include "buf.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static enum log_level min_level = LOG_INFO;
static bool json_lines;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static const char *const level_names[] = { "debug", "info", "warn", "error" };

void log_setup(enum log_level min, bool json)
{
	min_level = min;
	json_lines = json;
}

bool log_level_parse(const char *s, enum log_level *out)
{
	for (int i = 0; i <= LOG_ERROR; i++) {
		if (!strcasecmp(s, level_names[i])) {
			*out = (enum log_level)i;
			return true;
		}
	}
	return false;
}

const char *log_quote(const char *s, char *out, size_t size)
{
	size_t n = 0;
	for (; s && *s && n + 2 < size; s++) {
		if (*s == '"' || *s == '\\')
			out[n++] = '\\';
		out[n++] = *s == '\n' || *s == '\r' ? ' ' : *s;
	}
	out[n] = '\0';
	return out;
}

bool log_enabled(enum log_level lvl)
{
	return lvl >= min_level;
}

/* Appends "key=value key2=value2" as JSON members, values as strings. */
static void kv_to_json(struct buf *out, const char *kv)
{
	const char *p = kv;
	while (*p) {
		while (*p == ' ')
			p++;
		const char *eq = strchr(p, '=');
		if (!*p || !eq)
			break;
		char key[64];
		size_t kl = (size_t)(eq - p) < sizeof(key) - 1 ? (size_t)(eq - p) : sizeof(key) - 1;
		memcpy(key, p, kl);
		key[kl] = '\0';
		p = eq + 1;
		struct buf val;
		buf_init(&val, 1 << 16);
		if (*p == '"') {
			for (p++; *p && *p != '"'; p++) {
				if (*p == '\\' && p[1])
					p++;
				buf_addc(&val, *p);
			}
			if (*p == '"')
				p++;
		} else {
			while (*p && *p != ' ')
				buf_addc(&val, *p++);
		}
		buf_addc(out, ',');
		buf_add_json_str(out, key);
		buf_addc(out, ':');
		buf_add_json_str(out, buf_cstr(&val));
		buf_release(&val);
	}
}

void log_msg(enum log_level lvl, const char *msg, const char *kvfmt, ...)
{
	if (lvl < min_level)
		return;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	struct tm tm;
	gmtime_r(&ts.tv_sec, &tm);
	char when[40];
	size_t wl = strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(when + wl, sizeof(when) - wl, ".%03ldZ", ts.tv_nsec / 1000000);

	struct buf kv, line;
	buf_init(&kv, 1 << 16);
	buf_init(&line, 1 << 17);
	if (kvfmt && *kvfmt) {
		va_list ap;
		va_start(ap, kvfmt);
		buf_vprintf(&kv, kvfmt, ap);
		va_end(ap);
	}
	if (json_lines) {
		buf_printf(&line, "{\"ts\":\"%s\",\"level\":\"%s\",\"msg\":", when, level_names[lvl]);
		buf_add_json_str(&line, msg);
		kv_to_json(&line, buf_cstr(&kv));
		buf_adds(&line, "}\n");
	} else {
		buf_printf(&line, "ts=%s level=%s msg=", when, level_names[lvl]);
		buf_add_json_str(&line, msg);
		if (kv.len) {
			buf_addc(&line, ' ');
			buf_add(&line, kv.data, kv.len);
		}
		buf_addc(&line, '\n');
	}
	pthread_mutex_lock(&log_lock);
	fwrite(line.data, 1, line.len, stderr);
	fflush(stderr);
	pthread_mutex_unlock(&log_lock);
	buf_release(&kv);
	buf_release(&line);
}
