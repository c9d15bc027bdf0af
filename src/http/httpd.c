#include "httpd.h"
#include "clock.h"
#include "jsonarena.h"
#include "log.h"
#include "metrics.h"
#include "strnum.h"

#include <arpa/inet.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Past this multiple of the cap, a chunked body is cut off mid-upload. */
#define DISCARD_FACTOR 4
/*
 * A connection that has not sent a whole request yet is closed after this
 * long without a byte (idle ones between requests after IDLE_SECONDS):
 * clients that connect and send nothing, or a header a byte at a time, give
 * their connection up sooner. (libmicrohttpd 0.9 has no deadline for a
 * whole header; the per-address limit bounds how many such clients hold.)
 */
#define HEADER_SECONDS 10
#define IDLE_SECONDS 30
/* How long a stopping server waits for requests in flight. */
#define DRAIN_SECONDS 10
/* How long a replaced daemon may keep connections that never go idle. */
#define RETIRE_SECONDS 60
/* Connections refused at a limit are logged at most once in this many seconds, with their count. */
#define REFUSED_LOG_SECONDS 10

struct conn_state;

/* The I/O pool: threads that run `waits` routes while MHD holds their connections suspended. */
struct io_pool {
	pthread_mutex_t lock;
	pthread_cond_t more;
	struct conn_state *head, *tail;  /* requests waiting for a thread */
	bool stopping;
	pthread_t *threads;
	int n;                           /* threads started */
};

/* The PEM text a daemon serves with; MHD reads it at start, so it lives as long as its daemon. */
struct tls_pem {
	char *cert, *key, *client_ca;
};

/*
 * A daemon that a certificate reload replaced: it accepts nothing, answers
 * its open connections with "Connection: close", and is stopped once they
 * are gone (or after RETIRE_SECONDS).
 */
struct retired {
	struct MHD_Daemon *daemon;
	struct tls_pem pem;
	int64_t since_ms;
	struct retired *next;
};

struct httpd {
	_Atomic(struct MHD_Daemon *) daemon;   /* the one accepting */
	struct tls_pem pem;                     /* what it serves with */
	struct retired *retired;
	struct http_route *routes;
	size_t nroutes;
	char prefix[128];
	size_t max_body;
	bool verify_clients;      /* a client CA is configured */
	char *cert_path, *key_path, *ca_path;
	/* What a daemon is started with (again, on a reload). */
	unsigned flags;
	struct sockaddr_storage addr;
	unsigned threads;
	int max_connections, max_per_address;
	int port;
	atomic_int inflight;      /* requests between their first byte and completion */
	void (*on_drained)(void);
	struct io_pool pool;
	_Atomic uint64_t refused_unlogged;  /* connections refused at a limit since the last log line */
	_Atomic int64_t refused_logged_at;
};

/* Per-connection request state, kept in MHD's con_cls. */
struct conn_state {
	struct buf body;
	size_t received;
	struct timespec start;
	bool too_big;
	/* A request handed to the I/O pool; its answer waits here until MHD resumes the connection. */
	struct MHD_Connection *conn;
	const struct http_route *route;
	const char *method, *path;
	struct http_response resp;
	atomic_bool answered;
	struct conn_state *next;
};

static double since(const struct timespec *t0)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - t0->tv_sec) + (double)(now.tv_nsec - t0->tv_nsec) / 1e9;
}

void httpd_error(struct http_response *resp, int status, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	resp->status = status;
	resp->content_type = "application/json";
	buf_clear(&resp->body);
	buf_adds(&resp->body, "{\"Error\":");
	buf_add_json_str(&resp->body, msg);
	buf_adds(&resp->body, "}\n");
}

const char *httpd_query(const struct http_request *req, const char *key)
{
	return MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, key);
}

const char *httpd_header(const struct http_request *req, const char *name)
{
	return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

/* Bytes MHD asks a stream for at a time. */
#define STREAM_BLOCK (64u << 10)

/* A body sent as it is made (struct http_stream): the part made last, and how much of it is out. */
struct stream_state {
	struct http_stream s;
	struct buf part;
	size_t at;
	bool ended;
};

static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max)
{
	(void)pos;
	struct stream_state *st = cls;
	while (st->at == st->part.len) {
		if (st->ended)
			return MHD_CONTENT_READER_END_OF_STREAM;
		buf_clear(&st->part);
		st->at = 0;
		st->ended = !st->s.more(st->s.ctx, &st->part);
	}
	size_t n = st->part.len - st->at < max ? st->part.len - st->at : max;
	memcpy(out, st->part.data + st->at, n);
	st->at += n;
	return (ssize_t)n;
}

static void stream_free(void *cls)
{
	struct stream_state *st = cls;
	st->s.done(st->s.ctx);
	buf_release(&st->part);
	free(st);
}

/* The MHD response of r: its body, or its stream (which it then owns, body first). NULL when out of memory. */
static struct MHD_Response *response_of(struct http_response *r)
{
	if (r->stream.more) {
		struct stream_state *st = calloc(1, sizeof(*st));
		struct MHD_Response *resp = st ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK,
										   stream_read, st, stream_free) : NULL;
		if (!resp) {
			r->stream.done(r->stream.ctx);
			buf_release(&r->body);
			free(st);
		} else {
			st->s = r->stream;
			st->part = r->body;
		}
		r->body = (struct buf){ 0 };
		r->stream = (struct http_stream){ 0 };
		return resp;
	}
	size_t len;
	char *data = buf_detach(&r->body, &len);
	struct MHD_Response *resp = MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE);
	if (!resp)
		free(data);
	return resp;
}

static enum MHD_Result reply(struct httpd *h, struct MHD_Connection *conn, struct http_response *r,
			     const char *allow)
{
	struct MHD_Response *resp = response_of(r);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, "Content-Type", r->content_type ? r->content_type : "application/json");
	if (allow)
		MHD_add_response_header(resp, "Allow", allow);
	/* A connection of a replaced daemon closes after this answer; the client reconnects to the new one. */
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_DAEMON);
	if (ci && ci->daemon != atomic_load(&h->daemon))
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
	enum MHD_Result ok = MHD_queue_response(conn, (unsigned)r->status, resp);
	MHD_destroy_response(resp);
	return ok;
}

/* The path without the URL prefix, when it carries it. */
static const char *strip_prefix(const struct httpd *h, const char *url)
{
	size_t n = strlen(h->prefix);
	if (n && !strncmp(url, h->prefix, n) && (url[n] == '/' || !url[n]))
		return url[n] ? url + n : "/";
	return url;
}

/* The route of the request, or NULL with the 404/405 answer in r. */
static const struct http_route *find_route(struct httpd *h, const char *method, const char *path,
					   struct http_response *r, enum metric_verb *verb,
					   char *allow, size_t allow_len)
{
	bool path_known = false;
	for (size_t i = 0; i < h->nroutes; i++) {
		if (strcmp(h->routes[i].path, path))
			continue;
		path_known = true;
		*verb = h->routes[i].verb;
		if (!strcmp(h->routes[i].method, method))
			return &h->routes[i];
	}
	if (path_known) {
		/* Each path is served by one method in this product. */
		for (size_t i = 0; i < h->nroutes; i++)
			if (!strcmp(h->routes[i].path, path))
				snprintf(allow, allow_len, "%s", h->routes[i].method);
		httpd_error(r, 405, "%s does not accept %s", path, method);
	} else {
		httpd_error(r, 404, "no such endpoint: %s", path);
	}
	return NULL;
}

/* Runs the route's arrival step (r NULL) or its handler. */
static void run_route(struct httpd *h, const struct http_route *route, struct MHD_Connection *conn,
		      const char *method, const char *path, struct conn_state *st, struct http_response *r)
{
	struct http_request req = {
		.method = method, .path = path, .body = buf_cstr(&st->body),
		.body_len = st->body.len, .conn = conn,
	};
	/* The handler's JSON trees come from one arena, dropped when it returns. */
	struct jsonarena arena;
	jsonarena_begin(&arena, h->max_body * 32 + (1u << 20));
	if (r)
		route->handler(route->ctx, &req, r);
	else
		route->arrive(route->ctx, &req);
	jsonarena_end(&arena);
}

/*
 * libmicrohttpd's own messages, in this log's format. A connection closed
 * at once at maxConnections or maxConnectionsPerAddress (libmicrohttpd says
 * the same for both) is counted; a burst past the limit would write a line
 * per connection, so its lines come at most once in REFUSED_LOG_SECONDS,
 * with the count since the last one.
 */
__attribute__((format(printf, 2, 0))) static void on_mhd_message(void *cls, const char *fmt, va_list ap)
{
	struct httpd *h = cls;
	char msg[512];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	size_t n = strlen(msg);
	while (n && (msg[n - 1] == '\n' || msg[n - 1] == ' '))
		msg[--n] = '\0';
	if (!strstr(msg, "connection limit")) {
		log_warn("http server", "message=\"%s\"", LOG_Q(msg));
		return;
	}
	metrics_inc(M_HTTP_REFUSED, 0);
	atomic_fetch_add(&h->refused_unlogged, 1);
	int64_t now = (int64_t)time(NULL), last = atomic_load(&h->refused_logged_at);
	if (now - last < REFUSED_LOG_SECONDS || !atomic_compare_exchange_strong(&h->refused_logged_at, &last, now))
		return;
	log_warn("connections refused at the connection limit", "count=%llu max_connections=%d max_per_address=%d",
		 (unsigned long long)atomic_exchange(&h->refused_unlogged, 0), h->max_connections, h->max_per_address);
}

/* A connection's client certificate, as checked by its first request that needed it. */
enum client_cert { CERT_UNCHECKED, CERT_VALID, CERT_REFUSED };

/*
 * A new connection gets the short header timeout; with a client CA, also a
 * slot for its certificate's verdict, freed when it closes.
 */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
			  enum MHD_ConnectionNotificationCode code)
{
	const struct httpd *h = cls;
	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)HEADER_SECONDS);
		*socket_context = h->verify_clients ? calloc(1, sizeof(enum client_cert)) : NULL;
	} else {
		free(*socket_context);
	}
}

/*
 * Whether the TLS client presented a certificate of the client CA, valid,
 * for client authentication. Checked once per connection (the chain check
 * costs more than a filter), as the certificate cannot change within it.
 */
static bool client_verified(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *sc = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	enum client_cert *verdict = sc ? sc->socket_context : NULL;
	if (verdict && *verdict != CERT_UNCHECKED)
		return *verdict == CERT_VALID;
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
	gnutls_typed_vdata_st purpose = {
		.type = GNUTLS_DT_KEY_PURPOSE_OID, .data = (unsigned char *)GNUTLS_KP_TLS_WWW_CLIENT,
	};
	unsigned status = 0;
	/* Fails (no certificate found) when the client sent none. */
	bool valid = ci && ci->tls_session &&
		     gnutls_certificate_verify_peers((gnutls_session_t)ci->tls_session, &purpose, 1, &status) == 0 &&
		     status == 0;
	if (verdict)
		*verdict = valid ? CERT_VALID : CERT_REFUSED;
	return valid;
}

/* ---- the I/O pool ---- */

static void *io_thread(void *arg)
{
	struct httpd *h = arg;
	struct io_pool *p = &h->pool;
	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (!p->head && !p->stopping)
			pthread_cond_wait(&p->more, &p->lock);
		struct conn_state *st = p->head;
		if (!st)
			break;               /* stopping, and nothing left to answer */
		p->head = st->next;
		if (!p->head)
			p->tail = NULL;
		pthread_mutex_unlock(&p->lock);
		run_route(h, st->route, st->conn, st->method, st->path, st, &st->resp);
		atomic_store(&st->answered, true);
		MHD_resume_connection(st->conn);
		pthread_mutex_lock(&p->lock);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

static void pool_start(struct httpd *h, int n)
{
	struct io_pool *p = &h->pool;
	if (n <= 0 || !(p->threads = calloc((size_t)n, sizeof(*p->threads))))
		return;
	while (p->n < n && !pthread_create(&p->threads[p->n], NULL, io_thread, h))
		p->n++;
	if (p->n < n)
		log_warn("fewer I/O threads than asked for", "started=%d wanted=%d", p->n, n);
}

/*
 * Suspends the request's connection and queues it; false when the pool takes
 * none (then the caller runs it). Under the lock, so that no thread can
 * resume the connection before it is suspended.
 */
static bool pool_submit(struct io_pool *p, struct conn_state *st)
{
	pthread_mutex_lock(&p->lock);
	bool taken = p->n > 0 && !p->stopping;
	if (taken) {
		MHD_suspend_connection(st->conn);
		st->next = NULL;
		if (p->tail)
			p->tail->next = st;
		else
			p->head = st;
		p->tail = st;
		pthread_cond_signal(&p->more);
	}
	pthread_mutex_unlock(&p->lock);
	return taken;
}

/* Answers what was queued, then joins the threads. */
static void pool_stop(struct io_pool *p)
{
	pthread_mutex_lock(&p->lock);
	p->stopping = true;
	pthread_cond_broadcast(&p->more);
	pthread_mutex_unlock(&p->lock);
	for (int i = 0; i < p->n; i++)
		pthread_join(p->threads[i], NULL);
}

/* A request's header came: its state in *con_cls; an announced body over the limit is refused here. */
static enum MHD_Result begin_request(struct httpd *h, struct MHD_Connection *conn, void **con_cls)
{
	struct conn_state *st = calloc(1, sizeof(*st));
	if (!st)
		return MHD_NO;
	buf_init(&st->body, h->max_body);
	clock_gettime(CLOCK_MONOTONIC, &st->start);
	/* A whole header came: from now on the connection may idle as a kept-alive one. */
	MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)IDLE_SECONDS);
	*con_cls = st;
	atomic_fetch_add(&h->inflight, 1);
	/* Refuse an announced oversized body before reading any of it. */
	const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
	int64_t len;
	if (cl && strnum_i64(cl, &len) && len > (int64_t)h->max_body) {
		struct http_response r = { .status = 413 };
		buf_init(&r.body, 4096);
		httpd_error(&r, 413, "request body of %lld bytes is over the limit of %zu",
			    (long long)len, h->max_body);
		metrics_request(VERB_OTHER, 413, since(&st->start));
		return reply(h, conn, &r, NULL);
	}
	return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_size, void **con_cls)
{
	(void)version;
	struct httpd *h = cls;
	struct conn_state *st = *con_cls;
	if (!st)
		return begin_request(h, conn, con_cls);
	if (*upload_size) {
		st->received += *upload_size;
		if (!st->too_big && buf_add(&st->body, upload, *upload_size))
			st->too_big = true;
		*upload_size = 0;
		/* A chunked body that goes on and on: drop the connection. */
		return st->received > h->max_body * DISCARD_FACTOR ? MHD_NO : MHD_YES;
	}
	struct http_response r = { .status = 200 };
	enum metric_verb verb = VERB_OTHER;
	char allow[16] = "";
	if (atomic_load(&st->answered)) {
		/* Resumed: the I/O pool ran the handler. */
		r = st->resp;
		st->resp.body = (struct buf){ 0 };
		st->resp.stream = (struct http_stream){ 0 };
		verb = st->route->verb;
	} else {
		buf_init(&r.body, (size_t)1 << 30);
		const char *path = strip_prefix(h, url);
		const struct http_route *match = NULL;
		if (st->too_big)
			httpd_error(&r, 413, "request body is over the limit of %zu bytes", h->max_body);
		else
			match = find_route(h, method, path, &r, &verb, allow, sizeof(allow));
		if (match && h->verify_clients && !match->open && !client_verified(conn)) {
			httpd_error(&r, 401, "%s needs a client certificate signed by the configured client CA", path);
			match = NULL;
		}
		if (match && match->arrive)
			run_route(h, match, conn, method, path, st, NULL);
		if (match && match->waits) {
			st->conn = conn;
			st->route = match;
			st->method = method;   /* MHD keeps the request line while the connection is suspended */
			st->path = path;
			st->resp = r;
			if (pool_submit(&h->pool, st))
				return MHD_YES;
			st->resp.body = (struct buf){ 0 };
		}
		if (match)
			run_route(h, match, conn, method, path, st, &r);
	}
	metrics_request(verb, r.status, since(&st->start));
	if (r.status >= 500)
		log_warn("request failed", "method=%s path=%s status=%d", method, url, r.status);
	else
		log_debug("request", "method=%s path=%s status=%d", method, url, r.status);
	return reply(h, conn, &r, allow[0] ? allow : NULL);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	(void)conn;
	(void)toe;
	struct httpd *h = cls;
	struct conn_state *st = *con_cls;
	if (st) {
		buf_release(&st->body);
		buf_release(&st->resp.body);
		if (st->resp.stream.more)   /* a queued answer never sent */
			st->resp.stream.done(st->resp.stream.ctx);
		free(st);
		*con_cls = NULL;
		if (atomic_fetch_sub(&h->inflight, 1) == 1 && h->on_drained)
			h->on_drained();
	}
}

static char *read_pem(const char *path, char *err, size_t errlen)
{
	struct buf b;
	buf_init(&b, 1 << 20);
	int rc = buf_read_file(&b, path, err, errlen);
	if (!rc && !b.len) {
		snprintf(err, errlen, "%s: empty", path);
		rc = -1;
	}
	if (rc) {
		buf_release(&b);
		return NULL;
	}
	return buf_detach(&b, NULL);
}

static void pem_free(struct tls_pem *p)
{
	free(p->cert);
	free(p->key);
	free(p->client_ca);
	*p = (struct tls_pem){ 0 };
}

static bool pem_equal(const struct tls_pem *a, const struct tls_pem *b)
{
	return !strcmp(a->cert, b->cert) && !strcmp(a->key, b->key) &&
	       !strcmp(a->client_ca ? a->client_ca : "", b->client_ca ? b->client_ca : "");
}

/* GnuTLS's words for why PEM files do not load, in the reader's terms. */
static const char *tls_reason(int rc)
{
	switch (rc) {
	case GNUTLS_E_REQUESTED_DATA_NOT_AVAILABLE:
	case GNUTLS_E_BASE64_DECODING_ERROR:
	case GNUTLS_E_BASE64_UNEXPECTED_HEADER_ERROR:
		return "no PEM certificate or key found";
	case GNUTLS_E_CERTIFICATE_KEY_MISMATCH:
		return "the key is not the certificate's";
	default:
		return "not a PEM certificate and its private key";
	}
}

/*
 * Reads the certificate, key and client CA files and checks that they load
 * together (the key is the certificate's, the CA file holds a certificate),
 * so that a half-written or mismatched set is refused before any daemon
 * serves it.
 */
static int pem_load(const char *cert_path, const char *key_path, const char *ca_path, struct tls_pem *p,
		    char *err, size_t errlen)
{
	*p = (struct tls_pem){ 0 };
	if (!(p->cert = read_pem(cert_path, err, errlen)) || !(p->key = read_pem(key_path, err, errlen)) ||
	    (ca_path && !(p->client_ca = read_pem(ca_path, err, errlen)))) {
		pem_free(p);
		return -1;
	}
	gnutls_certificate_credentials_t cred;
	if (gnutls_certificate_allocate_credentials(&cred) < 0) {
		snprintf(err, errlen, "out of memory");
		pem_free(p);
		return -1;
	}
	gnutls_datum_t cert = { (unsigned char *)p->cert, (unsigned)strlen(p->cert) };
	gnutls_datum_t key = { (unsigned char *)p->key, (unsigned)strlen(p->key) };
	int rc = gnutls_certificate_set_x509_key_mem(cred, &cert, &key, GNUTLS_X509_FMT_PEM);
	if (rc < 0) {
		snprintf(err, errlen, "certificate %s with key %s: %s (GnuTLS: %s)", cert_path, key_path,
			 tls_reason(rc), gnutls_strerror(rc));
	} else if (p->client_ca) {
		gnutls_datum_t ca = { (unsigned char *)p->client_ca, (unsigned)strlen(p->client_ca) };
		int n = gnutls_certificate_set_x509_trust_mem(cred, &ca, GNUTLS_X509_FMT_PEM);
		if (n <= 0) {
			snprintf(err, errlen, "client CA %s: no PEM certificate found%s%s%s", ca_path,
				 n < 0 ? " (GnuTLS: " : "", n < 0 ? gnutls_strerror(n) : "", n < 0 ? ")" : "");
			rc = -1;
		}
	}
	gnutls_certificate_free_credentials(cred);
	if (rc < 0)
		pem_free(p);
	return rc < 0 ? -1 : 0;
}

int httpd_tls_check(const char *cert, const char *key, const char *client_ca, char *err, size_t errlen)
{
	struct tls_pem p;
	if (pem_load(cert, key, client_ca && *client_ca ? client_ca : NULL, &p, err, errlen))
		return -1;
	pem_free(&p);
	return 0;
}

/* A daemon serving with pem (NULL: plain HTTP), on the given listening socket or a new one. */
static struct MHD_Daemon *daemon_start(struct httpd *h, const struct tls_pem *pem, MHD_socket listen_fd)
{
	bool tls = pem != NULL;
	struct MHD_OptionItem opts[] = {
		{ listen_fd != MHD_INVALID_SOCKET ? MHD_OPTION_LISTEN_SOCKET : MHD_OPTION_SOCK_ADDR,
		  (intptr_t)listen_fd, listen_fd != MHD_INVALID_SOCKET ? NULL : &h->addr },
		{ MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, h },
		{ MHD_OPTION_CONNECTION_TIMEOUT, IDLE_SECONDS, NULL },
		/* Idle clients of one address cannot take every connection from the others. */
		{ MHD_OPTION_CONNECTION_LIMIT, h->max_connections > 0 ? h->max_connections : 4096, NULL },
		{ h->max_per_address > 0 ? MHD_OPTION_PER_IP_CONNECTION_LIMIT : MHD_OPTION_END,
		  h->max_per_address, NULL },
		{ MHD_OPTION_LISTEN_BACKLOG_SIZE, 512, NULL },
		{ h->threads > 1 ? MHD_OPTION_THREAD_POOL_SIZE : MHD_OPTION_END, h->threads, NULL },
		{ tls ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, 0, tls ? pem->cert : NULL },
		{ tls ? MHD_OPTION_HTTPS_MEM_KEY : MHD_OPTION_END, 0, tls ? pem->key : NULL },
		/* The server then asks every client for a certificate; client_verified() checks it. */
		{ tls && pem->client_ca ? MHD_OPTION_HTTPS_MEM_TRUST : MHD_OPTION_END, 0, tls ? pem->client_ca : NULL },
		{ MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)on_connection, h },
		{ MHD_OPTION_END, 0, NULL },
	};
	/* Options after the first END are ignored: move the used ones to the front. */
	struct MHD_OptionItem used[sizeof(opts) / sizeof(opts[0])];
	size_t nu = 0;
	for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++)
		if (opts[i].option != MHD_OPTION_END)
			used[nu++] = opts[i];
	used[nu] = (struct MHD_OptionItem){ MHD_OPTION_END, 0, NULL };
	/* The logger first, or the library says so on stderr in its own format at every start. */
	return MHD_start_daemon(h->flags, (uint16_t)h->port, NULL, NULL, on_request, h,
				MHD_OPTION_EXTERNAL_LOGGER, on_mhd_message, h, MHD_OPTION_ARRAY, used, MHD_OPTION_END);
}

static unsigned daemon_connections(struct MHD_Daemon *d)
{
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
	return info ? info->num_connections : 0;
}

/* Stops the replaced daemons whose connections are gone, or all of them. */
static void retired_stop(struct httpd *h, bool all)
{
	int64_t now = clock_mono_ms();
	for (struct retired **pp = &h->retired; *pp;) {
		struct retired *r = *pp;
		bool drained = daemon_connections(r->daemon) == 0;
		/* Past its time, at a moment no request is in flight (none may be suspended when MHD stops). */
		bool overdue = now - r->since_ms >= RETIRE_SECONDS * 1000 && !atomic_load(&h->inflight);
		if (!all && !drained && !overdue) {
			pp = &r->next;
			continue;
		}
		MHD_stop_daemon(r->daemon);
		pem_free(&r->pem);
		*pp = r->next;
		free(r);
	}
}

static void free_httpd(struct httpd *h)
{
	free(h->pool.threads);
	pthread_cond_destroy(&h->pool.more);
	pthread_mutex_destroy(&h->pool.lock);
	free(h->routes);
	pem_free(&h->pem);
	free(h->cert_path);
	free(h->key_path);
	free(h->ca_path);
	free(h);
}

/* The bind address, as MHD_OPTION_SOCK_ADDR wants it. */
static int set_address(struct httpd *h, const char *host, int port, char *err, size_t errlen)
{
	struct sockaddr_in *a4 = (struct sockaddr_in *)&h->addr;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&h->addr;
	memset(&h->addr, 0, sizeof(h->addr));
	if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
		a4->sin_family = AF_INET;
		a4->sin_port = htons((uint16_t)port);
	} else if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons((uint16_t)port);
		h->flags |= MHD_USE_IPv6;
	} else {
		snprintf(err, errlen, "listen address '%s' is not an IP address", host);
		return -1;
	}
	return 0;
}

/* The certificate, key and client CA the config names, kept (paths and PEM) for reloads. */
static int load_tls(struct httpd *h, const struct httpd_config *cfg, char *err, size_t errlen)
{
	h->flags |= MHD_USE_TLS;
	h->cert_path = strdup(cfg->tls_cert);
	h->key_path = strdup(cfg->tls_key ? cfg->tls_key : "");
	h->ca_path = h->verify_clients ? strdup(cfg->client_ca) : NULL;
	if (!h->cert_path || !h->key_path || (h->verify_clients && !h->ca_path)) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	return pem_load(h->cert_path, h->key_path, h->ca_path, &h->pem, err, errlen);
}

struct httpd *httpd_start(const struct httpd_config *cfg, const struct http_route *routes,
			  size_t nroutes, char *err, size_t errlen)
{
	struct httpd *h = calloc(1, sizeof(*h));
	if (h) {
		pthread_mutex_init(&h->pool.lock, NULL);
		pthread_cond_init(&h->pool.more, NULL);
	}
	if (!h || !(h->routes = malloc(nroutes * sizeof(*routes)))) {
		snprintf(err, errlen, "out of memory");
		if (h)
			free_httpd(h);
		return NULL;
	}
	memcpy(h->routes, routes, nroutes * sizeof(*routes));
	h->nroutes = nroutes;
	h->max_body = cfg->max_body;
	h->on_drained = cfg->on_drained;
	snprintf(h->prefix, sizeof(h->prefix), "%s", cfg->url_prefix ? cfg->url_prefix : "");
	size_t pl = strlen(h->prefix);
	while (pl && h->prefix[pl - 1] == '/')
		h->prefix[--pl] = '\0';

	/* ITC lets a thread pool's listening socket be quiesced (by a reload and by httpd_stop()). */
	h->flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG | MHD_USE_ITC | MHD_ALLOW_SUSPEND_RESUME;
	h->port = cfg->port;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	h->threads = (unsigned)(cfg->threads > 0 ? cfg->threads : ncpu > 0 ? ncpu : 2);
	h->max_connections = cfg->max_connections;
	h->max_per_address = cfg->max_per_address;
	if (set_address(h, cfg->host, cfg->port, err, errlen)) {
		free_httpd(h);
		return NULL;
	}

	bool tls = cfg->tls_cert && *cfg->tls_cert;
	h->verify_clients = cfg->client_ca && *cfg->client_ca;
	if (h->verify_clients && !tls) {
		snprintf(err, errlen, "a client CA needs TLS (a certificate and key to serve with)");
		free_httpd(h);
		return NULL;
	}
	/*
	 * epoll, but poll() with TLS: a certificate reload quiesces the serving
	 * daemon while its threads run, and libmicrohttpd's epoll loop races that
	 * (both take the listening socket out of the epoll set; the loser's
	 * ENOENT is a panic that aborts the process). With poll() each thread is
	 * told through its ITC and drops the socket itself.
	 */
	h->flags |= tls ? MHD_USE_POLL : MHD_USE_EPOLL;
	if (tls && load_tls(h, cfg, err, errlen)) {
		free_httpd(h);
		return NULL;
	}
	struct MHD_Daemon *d = daemon_start(h, tls ? &h->pem : NULL, MHD_INVALID_SOCKET);
	if (!d) {
		snprintf(err, errlen, "cannot serve on %s:%d (address in use?)", cfg->host, cfg->port);
		free_httpd(h);
		return NULL;
	}
	atomic_store(&h->daemon, d);
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
	h->port = info ? info->port : cfg->port;
	pool_start(h, cfg->io_threads);
	return h;
}

void httpd_retire_idle(struct httpd *h)
{
	retired_stop(h, false);
}

int httpd_reload_tls(struct httpd *h, char *err, size_t errlen)
{
	retired_stop(h, false);
	if (!h->cert_path)
		return 0;
	struct tls_pem fresh;
	if (pem_load(h->cert_path, h->key_path, h->ca_path, &fresh, err, errlen))
		return -1;
	if (pem_equal(&fresh, &h->pem)) {
		pem_free(&fresh);
		return 0;
	}
	struct retired *r = calloc(1, sizeof(*r));
	if (!r) {
		snprintf(err, errlen, "out of memory");
		pem_free(&fresh);
		return -1;
	}
	/*
	 * The old daemon stops accepting and hands its listening socket to the
	 * new one: connections wait in the backlog meanwhile, none is refused,
	 * and requests in flight on the old daemon finish there.
	 */
	struct MHD_Daemon *old = atomic_load(&h->daemon);
	MHD_socket fd = MHD_quiesce_daemon(old);
	struct MHD_Daemon *d = fd == MHD_INVALID_SOCKET ? NULL : daemon_start(h, &fresh, fd);
	int rc = 1;
	if (d) {
		r->pem = h->pem;
		h->pem = fresh;
	} else {
		snprintf(err, errlen, "cannot start serving with the new certificate; serving the previous one");
		pem_free(&fresh);
		rc = -1;
		/* Serve on with the previous set rather than not at all. */
		if (fd == MHD_INVALID_SOCKET || !(d = daemon_start(h, &h->pem, fd))) {
			log_error("no longer accepting connections after a failed certificate reload", "port=%d", h->port);
			if (fd != MHD_INVALID_SOCKET)
				close(fd);
			free(r);
			return -1;
		}
	}
	r->daemon = old;
	r->since_ms = clock_mono_ms();
	r->next = h->retired;
	h->retired = r;
	atomic_store(&h->daemon, d);
	return rc;
}

int httpd_port(const struct httpd *h)
{
	return h->port;
}

void httpd_stop(struct httpd *h)
{
	if (!h)
		return;
	/* Stop accepting, let the requests in flight finish (bounded), then stop. */
	struct MHD_Daemon *d = atomic_load(&h->daemon);
	MHD_socket fd = MHD_quiesce_daemon(d);
	for (int i = 0; i < DRAIN_SECONDS * 100 && atomic_load(&h->inflight) > 0; i++)
		usleep(10000);
	/* No connection may stay suspended when MHD stops: the pool answers all it holds first. */
	pool_stop(&h->pool);
	retired_stop(h, true);
	MHD_stop_daemon(d);
	/* Only now: the daemon's thread may still take the socket out of its epoll set. */
	if (fd != MHD_INVALID_SOCKET)
		close(fd);
	free_httpd(h);
}
