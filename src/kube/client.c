/* Requests and watch streams to the API server, over libcurl. */
#include "kube.h"
#include "clock.h"
#include "log.h"
#include "strnum.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#define MAX_BODY ((size_t)256 << 20)    /* a full LIST page of a big cluster fits */
#define MAX_EVENT ((size_t)16 << 20)     /* one watch event */

struct kube_client {
	struct kube_config cfg;
	/*
	 * Idle curl handles, each with the connections it opened: a call takes
	 * the one used last (its connection is the warmest), and gives it back.
	 * A handle and its connections serve one call at a time; threads never
	 * share a connection cache (libcurl does not support that for
	 * concurrent threads: a shared one crashed, rarely, under binds and
	 * connection resets at once).
	 */
	pthread_mutex_t pool_lock;
	CURL **pool;
	int npool, pool_cap;
	pthread_mutex_t token_lock;          /* guards token and token_mtime */
	char token[4096];
	struct timespec token_mtime;
	time_t token_checked;
	atomic_long auth_refused;            /* status of the current refusal streak, 0: none */
	kube_transport_fn transport;         /* NULL: libcurl (every client but a simulation's) */
	void *transport_ctx;
};


static void copy_buf(struct buf *dst, const struct buf *src)
{
	buf_init(dst, src->cap);
	if (src->len)
		buf_add(dst, src->data, src->len);
}

static void global_init(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* An idle handle (reset: its connections, TLS sessions and DNS cache stay), or a new one. */
static CURL *pool_take(struct kube_client *c)
{
	pthread_mutex_lock(&c->pool_lock);
	CURL *h = c->npool ? c->pool[--c->npool] : NULL;
	pthread_mutex_unlock(&c->pool_lock);
	if (!h)
		return curl_easy_init();
	curl_easy_reset(h);
	return h;
}

static void pool_give(struct kube_client *c, CURL *h)
{
	pthread_mutex_lock(&c->pool_lock);
	if (c->npool == c->pool_cap) {
		int cap = c->pool_cap ? c->pool_cap * 2 : 16;
		CURL **grown = realloc(c->pool, (size_t)cap * sizeof(*grown));
		if (grown) {
			c->pool = grown;
			c->pool_cap = cap;
		}
	}
	bool kept = c->npool < c->pool_cap;
	if (kept)
		c->pool[c->npool++] = h;
	pthread_mutex_unlock(&c->pool_lock);
	if (!kept)
		curl_easy_cleanup(h);
}

struct kube_client *kube_client_new(const struct kube_config *cfg, char *err, size_t errlen)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, global_init);
	struct kube_client *c = calloc(1, sizeof(*c));
	if (!c) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	c->cfg = *cfg;
	copy_buf(&c->cfg.ca_pem, &cfg->ca_pem);
	copy_buf(&c->cfg.cert_pem, &cfg->cert_pem);
	copy_buf(&c->cfg.key_pem, &cfg->key_pem);
	snprintf(c->token, sizeof(c->token), "%s", cfg->token);
	pthread_mutex_init(&c->token_lock, NULL);
	pthread_mutex_init(&c->pool_lock, NULL);
	if (cfg->insecure)
		log_warn("TLS verification of the API server is OFF (insecure); never do this in production",
			 "server=%s", cfg->server);
	return c;
}

struct kube_client *kube_client_new_transport(kube_transport_fn fn, void *ctx)
{
	struct kube_client *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	kube_config_init(&c->cfg);
	pthread_mutex_init(&c->token_lock, NULL);
	pthread_mutex_init(&c->pool_lock, NULL);
	c->transport = fn;
	c->transport_ctx = ctx;
	return c;
}

void kube_client_free(struct kube_client *c)
{
	if (!c)
		return;
	for (int i = 0; i < c->npool; i++)
		curl_easy_cleanup(c->pool[i]);
	free(c->pool);
	pthread_mutex_destroy(&c->pool_lock);
	pthread_mutex_destroy(&c->token_lock);
	kube_config_release(&c->cfg);
	free(c);
}

const char *kube_client_namespace(const struct kube_client *c)
{
	return c->cfg.namespace;
}

/* The bearer token, re-read from its file when the file changed (rotation). */
static void current_token(struct kube_client *c, char *out, size_t size)
{
	pthread_mutex_lock(&c->token_lock);
	time_t now = time(NULL);
	if (c->cfg.token_file[0] && now != c->token_checked) {
		c->token_checked = now;
		struct stat st;
		if (!stat(c->cfg.token_file, &st) &&
		    (st.st_mtim.tv_sec != c->token_mtime.tv_sec || st.st_mtim.tv_nsec != c->token_mtime.tv_nsec)) {
			FILE *f = fopen(c->cfg.token_file, "r");
			if (f) {
				size_t n = fread(c->token, 1, sizeof(c->token) - 1, f);
				fclose(f);
				while (n && (c->token[n - 1] == '\n' || c->token[n - 1] == '\r'))
					n--;
				c->token[n] = '\0';
				c->token_mtime = st.st_mtim;
			}
		}
	}
	snprintf(out, size, "%s", c->token);
	pthread_mutex_unlock(&c->token_lock);
}

static void set_blob(CURL *h, CURLoption opt, const struct buf *b)
{
	struct curl_blob blob = { b->data, b->len, CURL_BLOB_COPY };
	curl_easy_setopt(h, opt, &blob);
}

/*
 * A curl handle set up for one call to path: from the pool for a request
 * (given back after it), a new one for a watch (the caller cleans that up);
 * the caller frees hdrs.
 */
static CURL *easy_for(struct kube_client *c, bool reuse, const char *method, const char *path,
		      const char *content_type, struct curl_slist **hdrs, char *err, size_t errlen)
{
	char url[2048];
	if (snprintf(url, sizeof(url), "%s%s", c->cfg.server, path) >= (int)sizeof(url)) {
		snprintf(err, errlen, "URL too long");
		return NULL;
	}
	CURL *h = reuse ? pool_take(c) : curl_easy_init();
	if (!h) {
		snprintf(err, errlen, "curl_easy_init failed");
		return NULL;
	}
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
	curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "https,http");
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	if (c->cfg.insecure) {
		curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
	}
	if (c->cfg.ca_pem.len)
		set_blob(h, CURLOPT_CAINFO_BLOB, &c->cfg.ca_pem);
	else if (c->cfg.ca_file[0])
		curl_easy_setopt(h, CURLOPT_CAINFO, c->cfg.ca_file);
	if (c->cfg.cert_pem.len) {
		set_blob(h, CURLOPT_SSLCERT_BLOB, &c->cfg.cert_pem);
		curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
	} else if (c->cfg.cert_file[0]) {
		curl_easy_setopt(h, CURLOPT_SSLCERT, c->cfg.cert_file);
	}
	if (c->cfg.key_pem.len) {
		set_blob(h, CURLOPT_SSLKEY_BLOB, &c->cfg.key_pem);
		curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
	} else if (c->cfg.key_file[0]) {
		curl_easy_setopt(h, CURLOPT_SSLKEY, c->cfg.key_file);
	}
	struct curl_slist *l = curl_slist_append(NULL, "Accept: application/json");
	char line[4200];
	snprintf(line, sizeof(line), "Content-Type: %s", content_type ? content_type : "application/json");
	l = curl_slist_append(l, line);
	l = curl_slist_append(l, "Expect:");
	l = curl_slist_append(l, "User-Agent: gpu-extender");
	char token[4096];
	current_token(c, token, sizeof(token));
	if (token[0]) {
		snprintf(line, sizeof(line), "Authorization: Bearer %s", token);
		l = curl_slist_append(l, line);
	}
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, l);
	*hdrs = l;
	return h;
}

void kube_response_init(struct kube_response *r)
{
	r->status = 0;
	r->retry_after = 0;
	buf_init(&r->body, MAX_BODY);
}

void kube_response_release(struct kube_response *r)
{
	buf_release(&r->body);
}

static size_t collect(char *p, size_t size, size_t n, void *ud)
{
	struct buf *b = ud;
	return buf_add(b, p, size * n) ? 0 : size * n;
}

struct header_ctx {
	long *retry_after;
};

static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
	struct header_ctx *hc = ud;
	size_t len = size * n;
	if (len > 12 && !strncasecmp(p, "Retry-After:", 12)) {
		char v[32];
		size_t vl = len - 12 < sizeof(v) - 1 ? len - 12 : sizeof(v) - 1;
		memcpy(v, p + 12, vl);
		v[vl] = '\0';
		char *s = v;
		while (*s == ' ')
			s++;
		s[strcspn(s, "\r\n ")] = '\0';
		int64_t secs;
		if (strnum_i64(s, &secs) && secs >= 0 && secs < 3600)
			*hc->retry_after = (long)secs;
	}
	return len;
}

int kube_request(struct kube_client *c, const char *method, const char *path, const char *body,
		 const char *content_type, long timeout_s, struct kube_response *r,
		 char *err, size_t errlen)
{
	buf_clear(&r->body);
	r->status = 0;
	r->retry_after = 0;
	if (c->transport)
		return c->transport(c->transport_ctx, method, path, body, content_type, timeout_s, r, err, errlen);
	struct curl_slist *hdrs = NULL;
	CURL *h = easy_for(c, true, method, path, content_type, &hdrs, err, errlen);
	if (!h)
		return -1;
	struct header_ctx hc = { &r->retry_after };
	curl_easy_setopt(h, CURLOPT_TIMEOUT, timeout_s > 0 ? timeout_s : 30L);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &r->body);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, &hc);
	if (body) {
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
	}
	CURLcode rc = curl_easy_perform(h);
	if (rc == CURLE_OK)
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
	else
		snprintf(err, errlen, "%s %s: %s", method, path, curl_easy_strerror(rc));
	pool_give(c, h);     /* (its options point at this call's data: reset before the next use) */
	curl_slist_free_all(hdrs);
	return rc == CURLE_OK ? 0 : -1;
}

const char *kube_status_message(const struct kube_response *r, char *out, size_t size)
{
	cJSON *j = cJSON_ParseWithLength(buf_cstr((struct buf *)&r->body), r->body.len);
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "message");
	if (cJSON_IsString(m))
		snprintf(out, size, "%s", m->valuestring);
	else
		snprintf(out, size, "%.*s", (int)(r->body.len < 300 ? r->body.len : 300), buf_cstr((struct buf *)&r->body));
	cJSON_Delete(j);
	return out;
}

cJSON *kube_get_object(struct kube_client *c, const char *path, const char *what, char *err, size_t errlen)
{
	struct kube_response resp;
	kube_response_init(&resp);
	cJSON *obj = NULL;
	char msg[256];
	if (kube_request(c, "GET", path, NULL, NULL, 10, &resp, err, errlen)) {
		/* err says why */
	} else if (resp.status != 200) {
		snprintf(err, errlen, "%s: HTTP %ld: %s", what, resp.status, kube_status_message(&resp, msg, sizeof(msg)));
	} else if (!(obj = cJSON_ParseWithLength(resp.body.data, resp.body.len))) {
		snprintf(err, errlen, "%s: the answer is not JSON", what);
	}
	kube_response_release(&resp);
	return obj;
}

/* ---- watch streams ----------------------------------------------------- */

void kube_watch_parser_init(struct kube_watch_parser *p, const struct kube_watch_ops *ops, size_t max_event)
{
	memset(p, 0, sizeof(*p));
	p->ops = ops;
	buf_init(&p->line, max_event);
}

void kube_watch_parser_release(struct kube_watch_parser *p)
{
	buf_release(&p->line);
}

int kube_watch_parser_feed(struct kube_watch_parser *p, const char *data, size_t len)
{
	if (p->ended_by_consumer || p->overflow)
		return -1;
	size_t start = 0;
	bool any = false;
	for (size_t i = 0; i < len; i++) {
		if (data[i] != '\n')
			continue;
		if (buf_add(&p->line, data + start, i - start)) {
			p->overflow = true;
			return -1;
		}
		start = i + 1;
		if (!p->line.len)
			continue;
		cJSON *ev = cJSON_ParseWithLength(p->line.data, p->line.len);
		buf_clear(&p->line);
		if (!ev) {
			log_warn("watch: skipping an event that is not JSON", "%s", "");
			continue;
		}
		int stop = p->ops->event(p->ops->ctx, ev);
		cJSON_Delete(ev);
		any = true;
		if (stop) {
			p->ended_by_consumer = true;
			if (p->ops->flush)
				p->ops->flush(p->ops->ctx);
			return -1;
		}
	}
	if (buf_add(&p->line, data + start, len - start)) {
		p->overflow = true;
		return -1;
	}
	if (any && p->ops->flush)
		p->ops->flush(p->ops->ctx);
	return 0;
}

struct stream {
	struct kube_watch_parser parse;
	atomic_bool *stop;
	CURL *h;
	long status;
	int64_t last_ms;        /* clock_mono_ms() of the last byte (or the start) */
	int64_t idle_ms;        /* 0: no bound */
	bool silent;            /* ended for want of bytes */
};

/* Hands the bytes of one read to the parser; a non-200 body is kept for the error. */
static size_t on_stream(char *p, size_t size, size_t n, void *ud)
{
	struct stream *s = ud;
	size_t len = size * n;
	s->last_ms = clock_mono_ms();
	if (!s->status)
		curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &s->status);
	if (s->status != 200)
		return buf_add(&s->parse.line, p, len) ? 0 : len;   /* an error body: keep it */
	return kube_watch_parser_feed(&s->parse, p, len) ? 0 : len;
}

static int on_progress(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
	(void)a;
	(void)b;
	(void)c;
	(void)d;
	struct stream *s = ud;
	if (s->stop && atomic_load(s->stop))
		return 1;
	/* (curl calls this about once a second while nothing arrives) */
	if (s->idle_ms && clock_mono_ms() - s->last_ms > s->idle_ms) {
		s->silent = true;
		return 1;
	}
	return 0;
}

int kube_watch(struct kube_client *c, const char *path, const struct kube_watch_ops *ops,
	       atomic_bool *stop, long *status, char *err, size_t errlen)
{
	*status = 0;
	if (c->transport) {
		snprintf(err, errlen, "watch %s: this client has no watch streams", path);
		return -1;
	}
	struct curl_slist *hdrs = NULL;
	CURL *h = easy_for(c, false, "GET", path, NULL, &hdrs, err, errlen);
	if (!h)
		return -1;
	struct stream s = { .stop = stop, .h = h, .last_ms = clock_mono_ms(), .idle_ms = (int64_t)ops->idle_s * 1000 };
	kube_watch_parser_init(&s.parse, ops, MAX_EVENT);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_stream);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
	curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(h, CURLOPT_XFERINFODATA, &s);
	curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
	/* The server ends the stream at timeoutSeconds; this is only a backstop. */
	curl_easy_setopt(h, CURLOPT_TIMEOUT, 900L);
	CURLcode rc = curl_easy_perform(h);
	if (!s.status)
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &s.status);
	*status = s.status;
	int ret = 0;
	if (s.status && s.status != 200) {
		struct kube_response r = { s.status, s.parse.line, 0 };
		char msg[300];
		snprintf(err, errlen, "HTTP %ld: %s", s.status, kube_status_message(&r, msg, sizeof(msg)));
		ret = -1;
	} else if (s.parse.overflow) {
		snprintf(err, errlen, "a watch event was larger than %zu bytes", MAX_EVENT);
		ret = -1;
	} else if (s.silent && !(stop && atomic_load(stop))) {
		snprintf(err, errlen, "no bytes for %d s (not even a bookmark)", ops->idle_s);
		ret = KUBE_WATCH_SILENT;
	} else if (rc != CURLE_OK && !s.parse.ended_by_consumer && !(stop && atomic_load(stop))) {
		snprintf(err, errlen, "%s", curl_easy_strerror(rc));
		ret = -1;
	}
	kube_watch_parser_release(&s.parse);
	curl_easy_cleanup(h);
	curl_slist_free_all(hdrs);
	return ret;
}

bool kube_client_auth_refused(struct kube_client *c, long status)
{
	return atomic_exchange(&c->auth_refused, status) != status;
}

void kube_client_auth_ok(struct kube_client *c)
{
	atomic_store(&c->auth_refused, 0);
}

int kube_escape(struct buf *out, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	int rc = 0;
	for (const unsigned char *p = (const unsigned char *)s; *p && !rc; p++) {
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		    *p == '-' || *p == '_' || *p == '.' || *p == '~')
			rc = buf_addc(out, (char)*p);
		else {
			char e[3] = { '%', hex[*p >> 4], hex[*p & 15] };
			rc = buf_add(out, e, 3);
		}
	}
	return rc;
}
