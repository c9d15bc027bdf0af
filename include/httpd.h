/*
 * httpd: the HTTP(S) server under the extender and the webhook, on
 * libmicrohttpd. Routes are exact paths (after an optional URL prefix);
 * bodies are capped (413 from the Content-Length alone, before reading);
 * unknown paths get 404 and wrong methods 405. Handlers run on the server's
 * worker threads and must be thread-safe. A route marked `waits` (its
 * handler waits on other servers, as a bind waits on the API server) runs on
 * a pool of I/O threads while its connection is suspended, so that it holds
 * no connection thread: the quick verbs on other connections go on being
 * answered. cJSON allocations a handler makes
 * come from a per-request arena (jsonarena.h) that is dropped when the
 * handler returns: a handler must not keep a cJSON tree it created.
 */
#ifndef GPU_HTTPD_H
#define GPU_HTTPD_H

#include "buf.h"
#include "metrics.h"

#include <stdbool.h>
#include <stddef.h>

struct http_request {
	const char *method;
	const char *path;         /* without the URL prefix */
	const char *body;         /* NUL-terminated; "" when none */
	size_t body_len;
	void *conn;               /* for httpd_query() */
};

/*
 * A body made while it is sent, for a page too large to hold at once
 * (/metrics at 65,000 nodes is 25 MiB): body goes first, then each time
 * the connection can take more, more() appends the next part to out, until
 * it returns false. done() is called once, when the answer is sent or the
 * connection is gone. Both run on the connection's thread, after the
 * handler returned.
 */
struct http_stream {
	bool (*more)(void *ctx, struct buf *out);
	void (*done)(void *ctx);
	void *ctx;
};

struct http_response {
	int status;               /* 200 unless the handler sets it */
	const char *content_type; /* default application/json */
	struct buf body;          /* capped by the server */
	struct http_stream stream;   /* more NULL: body is the whole answer */
};

typedef void (*http_handler)(void *ctx, const struct http_request *req, struct http_response *resp);
/* A route's first step, on the connection thread, before a `waits` handler is queued. */
typedef void (*http_arrival)(void *ctx, const struct http_request *req);

struct http_route {
	const char *method;       /* "GET" or "POST" */
	const char *path;         /* "/filter" */
	http_handler handler;
	void *ctx;
	enum metric_verb verb;    /* for request metrics */
	bool waits;               /* run on the I/O pool (see above) */
	http_arrival arrive;      /* NULL, or a quick step taken as the request comes in */
	bool open;                /* served without a client certificate when the server asks for one */
};

struct httpd_config {
	const char *host;         /* address to bind, e.g. "127.0.0.1" or "0.0.0.0" */
	int port;                 /* 0: pick a free port (see httpd_port) */
	const char *url_prefix;   /* "" or "/gpu-scheduler" */
	size_t max_body;
	int threads;              /* connection threads; 0: one per CPU */
	int max_connections;      /* open at once, all clients; 0: 4096 */
	int max_per_address;      /* open at once from one client address; 0: no limit of its own */
	int io_threads;           /* I/O pool for `waits` routes; 0: they run inline */
	const char *tls_cert;     /* PEM file paths; both NULL/"" for plain HTTP */
	const char *tls_key;
	/*
	 * With TLS: the CA (PEM file) that client certificates must chain to.
	 * Every route but the `open` ones then answers 401 unless the client
	 * presented a valid certificate of that CA for client authentication.
	 */
	const char *client_ca;
	/* Called by the thread whose request's end left none in flight; NULL: none. */
	void (*on_drained)(void);
};

struct httpd;

/* Starts serving; NULL with err set when the port or TLS files fail. */
struct httpd *httpd_start(const struct httpd_config *cfg, const struct http_route *routes,
			  size_t nroutes, char *err, size_t errlen);
/*
 * Whether a certificate, its key and a client CA (NULL or "": none) load as
 * httpd_start would load them; -1 with err naming the file and why.
 */
int httpd_tls_check(const char *cert, const char *key, const char *client_ca, char *err, size_t errlen);
int httpd_port(const struct httpd *h);
/*
 * Reads the TLS files again (certificate, key, client CA); when they changed
 * and load together, new connections are served with them while the open
 * ones finish on the previous set (their answers then close them). 1:
 * reloaded, 0: unchanged or plain HTTP, -1: err says why, and the previous
 * set is still served. Also does httpd_retire_idle(). From one thread at a
 * time.
 */
int httpd_reload_tls(struct httpd *h, char *err, size_t errlen);
/* Stops what earlier reloads replaced, once its connections are gone. */
void httpd_retire_idle(struct httpd *h);

/* Stops accepting, finishes in-flight requests, frees everything. */
void httpd_stop(struct httpd *h);

/* A query parameter of the request, or NULL. */
const char *httpd_query(const struct http_request *req, const char *key);
/* A header of the request (name in any case), or NULL. */
const char *httpd_header(const struct http_request *req, const char *name);

/* Sets a JSON error reply {"Error":"..."} with the status. */
void httpd_error(struct http_response *resp, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
