/*
 * httpd's I/O pool: a route that waits (as a bind waits on the API server)
 * must not hold the server's only connection thread, and a stopping server
 * answers what the pool holds before it stops.
 */
#include "testutil.h"

#include "httpd.h"
#include "log.h"

#include <curl/curl.h>
#include <pthread.h>
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

static const struct http_route routes[] = {
	{ .method = "POST", .path = "/wait", .handler = on_wait, .ctx = NULL, .verb = VERB_BIND, .waits = true },
	{ .method = "GET", .path = "/quick", .handler = on_quick, .ctx = NULL, .verb = VERB_OTHER },
};

static struct httpd *start(int io_threads)
{
	gate.entered = 0;
	gate.open = false;
	struct httpd_config hc = { .host = "127.0.0.1", .port = 0, .url_prefix = "", .max_body = 1 << 20,
				   .threads = 1, .io_threads = io_threads };
	char err[256];
	struct httpd *h = httpd_start(&hc, routes, 2, err, sizeof(err));
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
	buf_init(&c->reply, 1 << 16);
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

int main(void)
{
	log_setup(LOG_ERROR, false);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_waiting_route_holds_no_connection_thread),
		cmocka_unit_test(test_without_pool_it_runs_inline),
		cmocka_unit_test(test_stop_answers_what_the_pool_holds),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	curl_global_cleanup();
	return rc;
}
