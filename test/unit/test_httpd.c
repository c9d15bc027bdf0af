/*
 * httpd's I/O pool: a route that waits (as a bind waits on the API server)
 * must not hold the server's only connection thread, and a stopping server
 * answers what the pool holds before it stops. A streamed body goes out
 * whole after the handler's, and its end runs once, also when the client
 * hangs up half-way. Certificate reload: new
 * connections get the new certificate and client CA, open ones finish on the
 * old set and are closed after their next answer, a request in flight is
 * answered, and a set that does not load leaves the old one serving.
 */
#include "testutil.h"

#include "httpd.h"
#include "log.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <strings.h>
#include <unistd.h>

/* The waiting handler blocks until the test opens the gate. */
static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int entered;
	bool open;
} gate = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, false };

static void on_wait(void *ctx, const struct http_request *req, struct http_response *resp)
{
	(void)ctx;
	pthread_mutex_lock(&gate.mu);
	gate.entered++;
	pthread_cond_broadcast(&gate.cv);
	while (!gate.open)
		pthread_cond_wait(&gate.cv, &gate.mu);
	pthread_mutex_unlock(&gate.mu);
	buf_printf(&resp->body, "{\"waited\":\"%s\"}", req->body);
}

static void on_quick(void *ctx, const struct http_request *req, struct http_response *resp)
{
	(void)ctx;
	(void)req;
	buf_adds(&resp->body, "{\"quick\":true}");
}

/* A body made while it is sent: "head\n", then streamed.parts parts of 100 bytes; done() counted. */
#define STREAM_PARTS 3000
static struct {
	int parts, made;
	atomic_int done;
} streamed;

static bool stream_more(void *ctx, struct buf *out)
{
	(void)ctx;
	if (streamed.made == streamed.parts)
		return false;
	buf_printf(out, "%-99d\n", streamed.made++);
	return true;
}

static void stream_done(void *ctx)
{
	(void)ctx;
	atomic_fetch_add(&streamed.done, 1);
}

static void on_stream(void *ctx, const struct http_request *req, struct http_response *resp)
{
	(void)ctx;
	(void)req;
	streamed.made = 0;
	buf_adds(&resp->body, "head\n");
	resp->content_type = "text/plain";
	resp->stream = (struct http_stream){ stream_more, stream_done, NULL };
}

static const struct http_route routes[] = {
	{ .method = "POST", .path = "/wait", .handler = on_wait, .ctx = NULL, .verb = VERB_BIND, .waits = true },
	{ .method = "GET", .path = "/quick", .handler = on_quick, .ctx = NULL, .verb = VERB_OTHER },
	{ .method = "GET", .path = "/stream", .handler = on_stream, .ctx = NULL, .verb = VERB_OTHER },
};

/* Times the server found no request in flight any more (httpd_config.on_drained). */
static atomic_int drains;

static void count_drain(void)
{
	atomic_fetch_add(&drains, 1);
}

static struct httpd *start(int io_threads)
{
	gate.entered = 0;
	gate.open = false;
	atomic_store(&drains, 0);
	struct httpd_config hc = { .host = "127.0.0.1", .port = 0, .url_prefix = "", .max_body = 1 << 20,
				   .threads = 1, .io_threads = io_threads, .on_drained = count_drain };
	char err[256];
	struct httpd *h = httpd_start(&hc, routes, sizeof(routes) / sizeof(routes[0]), err, sizeof(err));
	if (!h)
		fail_msg("httpd_start: %s", err);
	return h;
}

static size_t collect(char *data, size_t size, size_t n, void *out)
{
	buf_add(out, data, size * n);
	return size * n;
}

/* One request on a connection of its own; the HTTP status, or 0 when it failed or timed out. */
struct call {
	int port;
	const char *path, *body;
	long timeout_ms;
	long status;
	struct buf reply;
};

static void *do_call(void *arg)
{
	struct call *c = arg;
	char url[128];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", c->port, c->path);
	buf_init(&c->reply, 1 << 20);
	CURL *h = curl_easy_init();
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, c->timeout_ms);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &c->reply);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	if (c->body)
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, c->body);
	c->status = 0;
	if (curl_easy_perform(h) == CURLE_OK)
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &c->status);
	curl_easy_cleanup(h);
	return NULL;
}

static void wait_entered(int n)
{
	pthread_mutex_lock(&gate.mu);
	while (gate.entered < n)
		pthread_cond_wait(&gate.cv, &gate.mu);
	pthread_mutex_unlock(&gate.mu);
}

static void open_gate(void)
{
	pthread_mutex_lock(&gate.mu);
	gate.open = true;
	pthread_cond_broadcast(&gate.cv);
	pthread_mutex_unlock(&gate.mu);
}

static void test_waiting_route_holds_no_connection_thread(void **state)
{
	(void)state;
	struct httpd *h = start(2);
	/* Two waiting requests at once: both run (two I/O threads), neither on the connection thread. */
	struct call w[2] = {
		{ httpd_port(h), "/wait", "a", 10000, 0, { 0 } },
		{ httpd_port(h), "/wait", "b", 10000, 0, { 0 } },
	};
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&t[i], NULL, do_call, &w[i]), 0);
	wait_entered(2);
	struct call q = { httpd_port(h), "/quick", NULL, 2000, 0, { 0 } };
	do_call(&q);
	assert_int_equal(q.status, 200);
	assert_string_equal(buf_cstr(&q.reply), "{\"quick\":true}");
	open_gate();
	for (int i = 0; i < 2; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(w[i].status, 200);
		char want[32];
		snprintf(want, sizeof(want), "{\"waited\":\"%s\"}", w[i].body);
		assert_string_equal(buf_cstr(&w[i].reply), want);
		buf_release(&w[i].reply);
	}
	/* Drained once: when the last waiting request ended, not when the quick one did while two waited. */
	for (int i = 0; i < 200 && !atomic_load(&drains); i++)
		usleep(10 * 1000);
	assert_int_equal(atomic_load(&drains), 1);
	buf_release(&q.reply);
	httpd_stop(h);
}

static void test_without_pool_it_runs_inline(void **state)
{
	(void)state;
	/* The control: with no I/O pool the one connection thread is taken, and the quick request waits. */
	struct httpd *h = start(0);
	struct call w = { httpd_port(h), "/wait", "c", 10000, 0, { 0 } };
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, do_call, &w), 0);
	wait_entered(1);
	struct call q = { httpd_port(h), "/quick", NULL, 500, 0, { 0 } };
	do_call(&q);
	assert_int_equal(q.status, 0);
	open_gate();
	pthread_join(t, NULL);
	assert_int_equal(w.status, 200);
	buf_release(&w.reply);
	buf_release(&q.reply);
	httpd_stop(h);
}

/* Waits up to 5 s for the stream's done() to have run n times. */
static int streams_done(int n)
{
	for (int i = 0; i < 500 && atomic_load(&streamed.done) < n; i++)
		usleep(10 * 1000);
	return atomic_load(&streamed.done);
}

static void test_stream_sends_body_then_parts_and_ends_once(void **state)
{
	(void)state;
	atomic_store(&streamed.done, 0);
	streamed.parts = STREAM_PARTS;
	struct httpd *h = start(0);
	struct call c = { httpd_port(h), "/stream", NULL, 10000, 0, { 0 } };
	do_call(&c);
	assert_int_equal(c.status, 200);
	struct buf want;
	buf_init(&want, 1 << 20);
	buf_adds(&want, "head\n");
	for (int i = 0; i < STREAM_PARTS; i++)
		buf_printf(&want, "%-99d\n", i);
	assert_int_equal(c.reply.len, want.len);
	assert_memory_equal(c.reply.data, want.data, want.len);
	assert_int_equal(streams_done(1), 1);
	buf_release(&want);
	buf_release(&c.reply);
	httpd_stop(h);
	assert_int_equal(atomic_load(&streamed.done), 1);
}

/* Takes the first bytes, then hangs up. */
static size_t hang_up(char *data, size_t size, size_t n, void *out)
{
	(void)data;
	*(size_t *)out += size * n;
	return 0;
}

static void test_stream_ends_once_when_the_client_hangs_up(void **state)
{
	(void)state;
	atomic_store(&streamed.done, 0);
	streamed.parts = 1000 * 1000;   /* 100 MB: more than the sockets between them hold */
	struct httpd *h = start(0);
	char url[128];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/stream", httpd_port(h));
	CURL *c = curl_easy_init();
	size_t got = 0;
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, hang_up);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &got);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	assert_int_equal(curl_easy_perform(c), CURLE_WRITE_ERROR);
	curl_easy_cleanup(c);
	assert_true(got > 0);
	/* The server finds the connection gone as it writes; the rest is never made, done() runs once. */
	assert_int_equal(streams_done(1), 1);
	assert_true(streamed.made < streamed.parts);
	/* The one connection thread serves on. */
	struct call q = { httpd_port(h), "/quick", NULL, 2000, 0, { 0 } };
	do_call(&q);
	assert_int_equal(q.status, 200);
	buf_release(&q.reply);
	httpd_stop(h);
	assert_int_equal(atomic_load(&streamed.done), 1);
}

static void *stop_server(void *arg)
{
	httpd_stop(arg);
	return NULL;
}

static void test_stop_answers_what_the_pool_holds(void **state)
{
	(void)state;
	struct httpd *h = start(1);
	struct call w = { httpd_port(h), "/wait", "d", 10000, 0, { 0 } };
	pthread_t t, s;
	assert_int_equal(pthread_create(&t, NULL, do_call, &w), 0);
	wait_entered(1);
	assert_int_equal(pthread_create(&s, NULL, stop_server, h), 0);
	usleep(100 * 1000);          /* the server is stopping, the request still in the pool */
	open_gate();
	pthread_join(s, NULL);
	pthread_join(t, NULL);
	assert_int_equal(w.status, 200);
	assert_string_equal(buf_cstr(&w.reply), "{\"waited\":\"d\"}");
	buf_release(&w.reply);
}


/* ---- certificate reload ---- */

static char pki[64];

static void sh(const char *fmt, ...)
{
	char cmd[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	if (system(cmd))
		fail_msg("failed: %s", cmd);
}

/* Two CAs, each with a server and a client certificate (openssl, as the deploy step uses). */
static void make_pki(void)
{
	snprintf(pki, sizeof(pki), "/tmp/test_httpd.XXXXXX");
	assert_non_null(mkdtemp(pki));
	const char *ec = "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
	for (int i = 1; i <= 2; i++) {
		sh("cd %s && %s -x509 -keyout ca%d.key -out ca%d.crt -subj /CN=ca%d -days 2 2>/dev/null", pki, ec, i, i, i);
		const char *kinds[] = { "server", "client" };
		for (int k = 0; k < 2; k++)
			sh("cd %s && %s -keyout %s%d.key -out %s%d.csr -subj /CN=%s%d 2>/dev/null && "
			   "printf 'extendedKeyUsage=%sAuth\\nsubjectAltName=IP:127.0.0.1\\n' >%s%d.ext && "
			   "openssl x509 -req -in %s%d.csr -CA ca%d.crt -CAkey ca%d.key -CAcreateserial -days 2 "
			   "-out %s%d.crt -extfile %s%d.ext 2>/dev/null",
			   pki, ec, kinds[k], i, kinds[k], i, kinds[k], i, kinds[k], kinds[k], i, kinds[k], i, i, i,
			   kinds[k], i, kinds[k], i);
	}
}

/* What the server serves with: certificate and key of one set, client CA of one CA. */
static void serve_files(const char *cert, const char *key, const char *ca)
{
	sh("cd %s && cp %s.crt tls.crt && cp %s.key tls.key && cp %s.crt client-ca.crt", pki, cert, key, ca);
}

static size_t note_close(char *data, size_t size, size_t n, void *closed)
{
	if (!strncasecmp(data, "Connection: close", 17))
		*(bool *)closed = true;
	return size * n;
}

/* GET or POST over TLS on handle h (kept open between calls); the status, 0 when it failed. */
static long tls_call(CURL *h, int port, const char *path, const char *body, int ca, int client, bool *closed)
{
	char url[128], cafile[128], cert[128], key[128];
	snprintf(url, sizeof(url), "https://127.0.0.1:%d%s", port, path);
	snprintf(cafile, sizeof(cafile), "%s/ca%d.crt", pki, ca);
	snprintf(cert, sizeof(cert), "%s/client%d.crt", pki, client);
	snprintf(key, sizeof(key), "%s/client%d.key", pki, client);
	struct buf sink;
	buf_init(&sink, 1 << 16);
	*closed = false;
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_CAINFO, cafile);
	curl_easy_setopt(h, CURLOPT_SSLCERT, cert);
	curl_easy_setopt(h, CURLOPT_SSLKEY, key);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 10000L);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, note_close);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, closed);
	if (body)
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
	else
		curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
	long status = 0;
	if (curl_easy_perform(h) == CURLE_OK)
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	buf_release(&sink);
	return status;
}

/* A call on a connection of its own. */
static long tls_call_new(int port, const char *path, int ca, int client)
{
	CURL *h = curl_easy_init();
	bool closed;
	long st = tls_call(h, port, path, NULL, ca, client, &closed);
	curl_easy_cleanup(h);
	return st;
}

struct tls_wait {
	int port;
	long status;
};

static void *tls_wait_call(void *arg)
{
	struct tls_wait *w = arg;
	CURL *h = curl_easy_init();
	bool closed;
	w->status = tls_call(h, w->port, "/wait", "r", 1, 1, &closed);
	curl_easy_cleanup(h);
	return NULL;
}

static void test_certificates_reload_without_dropping_requests(void **state)
{
	(void)state;
	make_pki();
	serve_files("server1", "server1", "ca1");
	char cert[128], key[128], ca[128], err[256];
	snprintf(cert, sizeof(cert), "%s/tls.crt", pki);
	snprintf(key, sizeof(key), "%s/tls.key", pki);
	snprintf(ca, sizeof(ca), "%s/client-ca.crt", pki);
	gate.entered = 0;
	gate.open = false;
	struct httpd_config hc = { .host = "127.0.0.1", .port = 0, .url_prefix = "", .max_body = 1 << 20,
				   .threads = 1, .io_threads = 1, .tls_cert = cert, .tls_key = key, .client_ca = ca };
	struct httpd *h = httpd_start(&hc, routes, sizeof(routes) / sizeof(routes[0]), err, sizeof(err));
	if (!h)
		fail_msg("httpd_start: %s", err);
	int port = httpd_port(h);

	/* A kept-alive connection, and a request in flight, from before the reload. */
	CURL *kept = curl_easy_init();
	bool closed;
	assert_int_equal(tls_call(kept, port, "/quick", NULL, 1, 1, &closed), 200);
	assert_false(closed);
	struct tls_wait w = { port, 0 };
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, tls_wait_call, &w), 0);
	wait_entered(1);

	assert_int_equal(httpd_reload_tls(h, err, sizeof(err)), 0);     /* nothing changed */
	serve_files("server2", "server2", "ca2");
	assert_int_equal(httpd_reload_tls(h, err, sizeof(err)), 1);

	/* New connections: the new server certificate, and only the new CA's clients. */
	assert_int_equal(tls_call_new(port, "/quick", 2, 2), 200);
	assert_int_equal(tls_call_new(port, "/quick", 1, 1), 0);         /* server1's CA no longer matches */
	assert_int_equal(tls_call_new(port, "/quick", 2, 1), 401);
	/* The open connection is answered on the old set, then closed. */
	assert_int_equal(tls_call(kept, port, "/quick", NULL, 1, 1, &closed), 200);
	assert_true(closed);
	open_gate();
	pthread_join(t, NULL);
	assert_int_equal(w.status, 200);

	/* A key that is not the certificate's: refused, and the previous set serves on. */
	sh("cp %s/server1.key %s", pki, key);
	assert_int_equal(httpd_reload_tls(h, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "do not match"));
	assert_int_equal(tls_call_new(port, "/quick", 2, 2), 200);
	/* An empty client CA file (caught mid-write): refused too. */
	serve_files("server2", "server2", "ca2");
	sh(": >%s", ca);
	assert_int_equal(httpd_reload_tls(h, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "empty"));
	serve_files("server2", "server2", "ca2");
	assert_int_equal(httpd_reload_tls(h, err, sizeof(err)), 0);
	curl_easy_cleanup(kept);
	httpd_stop(h);
	sh("rm -rf %s", pki);
}

int main(void)
{
	log_setup(LOG_ERROR, false);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_waiting_route_holds_no_connection_thread),
		cmocka_unit_test(test_without_pool_it_runs_inline),
		cmocka_unit_test(test_stop_answers_what_the_pool_holds),
		cmocka_unit_test(test_stream_sends_body_then_parts_and_ends_once),
		cmocka_unit_test(test_stream_ends_once_when_the_client_hangs_up),
		cmocka_unit_test(test_certificates_reload_without_dropping_requests),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	curl_global_cleanup();
	return rc;
}
