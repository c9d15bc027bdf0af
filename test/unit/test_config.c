/* Settings: defaults, the config file, flags, precedence and errors. */
#include "testutil.h"

#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char *write_tmp(const char *text)
{
	static char path[64];
	snprintf(path, sizeof(path), "/tmp/test-config-XXXXXX");
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return path;
}

static int parse(struct config *cfg, int argc, const char **argv, char *err)
{
	FILE *devnull = fopen("/dev/null", "w");
	int rc = config_parse_args(cfg, argc, (char **)argv, devnull, err, 256);
	fclose(devnull);
	return rc;
}

static void test_defaults(void **state)
{
	(void)state;
	struct config c;
	config_defaults(&c);
	assert_string_equal(c.listen, "127.0.0.1:8888");
	assert_int_equal(c.policy, POLICY_BINPACK);
	assert_int_equal(c.max_body, 8u << 20);
	assert_string_equal(c.res.gpu[0], "gpu.scheduling/gpu");
	assert_string_equal(c.lease_namespace, "gpu-system");
}

static void test_file_then_flags(void **state)
{
	(void)state;
	char *path = write_tmp("listen: 0.0.0.0:9000\n"
			       "defaultPolicy: spread\n"
			       "maxBodyBytes: 1Mi\n"
			       "resources:\n"
			       "  gpuCore: [gpu.scheduling/gpu-core, nano-gpu/gpu-percent]\n"
			       "log:\n"
			       "  level: debug\n"
			       "  json: true\n"
			       "webhook:\n"
			       "  listen: 0.0.0.0:8443\n"
			       "  certFile: /etc/wh/tls.crt\n"
			       "  keyFile: /etc/wh/tls.key\n");
	struct config c;
	config_defaults(&c);
	char err[256];
	/* The flag comes first on the line but still wins over the file. */
	const char *argv[] = { "serve", "--policy", "topology", "--config", path, "--threads=3" };
	assert_int_equal(parse(&c, 6, argv, err), 0);
	unlink(path);
	assert_string_equal(c.listen, "0.0.0.0:9000");
	assert_int_equal(c.policy, POLICY_TOPOLOGY);
	assert_int_equal(c.max_body, 1 << 20);
	assert_int_equal(c.res.ncore, 2);
	assert_string_equal(c.res.core[1], "nano-gpu/gpu-percent");
	assert_int_equal(c.log_level, LOG_DEBUG);
	assert_true(c.log_json);
	assert_int_equal(c.threads, 3);
	assert_string_equal(c.webhook_listen, "0.0.0.0:8443");
}

static void test_json_file(void **state)
{
	(void)state;
	char *path = write_tmp("{\"urlPrefix\":\"/gpu\",\"insecureSkipTLSVerify\":true,\"reapIntervalSeconds\":3}");
	struct config c;
	config_defaults(&c);
	char err[256];
	assert_int_equal(config_load_file(&c, path, err, sizeof(err)), 0);
	unlink(path);
	assert_string_equal(c.url_prefix, "/gpu");
	assert_true(c.insecure_skip_tls_verify);
	assert_int_equal(c.reap_interval_s, 3);
}

static void check_bad(const char *const *argv, int argc, const char *want)
{
	struct config c;
	config_defaults(&c);
	char err[256];
	assert_int_equal(parse(&c, argc, (const char **)argv, err), -1);
	if (!strstr(err, want))
		fail_msg("got '%s', want '%s'", err, want);
}

static void test_errors(void **state)
{
	(void)state;
	const char *a1[] = { "serve", "--nope" };
	check_bad(a1, 2, "unknown flag '--nope'");
	const char *a2[] = { "serve", "--policy", "fastest" };
	check_bad(a2, 3, "unknown policy 'fastest'");
	const char *a3[] = { "serve", "--max-body", "12" };
	check_bad(a3, 3, "not a size between 1Ki and 16Gi");
	const char *a4[] = { "serve", "--threads", "-2" };
	check_bad(a4, 3, "not a number");
	const char *a5[] = { "serve", "--listen" };
	check_bad(a5, 2, "--listen needs HOST:PORT");
	const char *a6[] = { "serve", "stray" };
	check_bad(a6, 2, "unexpected argument 'stray'");
	const char *a7[] = { "serve", "--log-json=maybe" };
	check_bad(a7, 2, "not true or false");
	const char *a8[] = { "serve", "--config", "/nonexistent.yaml" };
	check_bad(a8, 3, "/nonexistent.yaml");
	char *path = write_tmp("listen: [1, 2]\n");
	const char *a9[] = { "serve", "--config", path };
	check_bad(a9, 3, "listen: wrong type");
	unlink(path);
	path = write_tmp("unknownKey: 1\n");
	const char *a10[] = { "serve", "--config", path };
	check_bad(a10, 3, "unknown setting 'unknownKey'");
	unlink(path);
}

static void test_help(void **state)
{
	(void)state;
	struct config c;
	config_defaults(&c);
	char err[256];
	const char *argv[] = { "serve", "--help" };
	assert_int_equal(parse(&c, 2, argv, err), 1);
}

static void test_listen_split(void **state)
{
	(void)state;
	char host[64];
	int port;
	assert_int_equal(config_listen_split("127.0.0.1:8888", host, sizeof(host), &port), 0);
	assert_string_equal(host, "127.0.0.1");
	assert_int_equal(port, 8888);
	assert_int_equal(config_listen_split(":9000", host, sizeof(host), &port), 0);
	assert_string_equal(host, "0.0.0.0");
	assert_int_equal(config_listen_split("[::1]:80", host, sizeof(host), &port), 0);
	assert_string_equal(host, "::1");
	assert_int_equal(config_listen_split("nohost", host, sizeof(host), &port), -1);
	assert_int_equal(config_listen_split("h:99999", host, sizeof(host), &port), -1);
}

/* A TLS flag without its pair names the one missing (issue 28). */
static void test_tls_pairs(void **state)
{
	(void)state;
	const char *a1[] = { "serve", "--tls-cert", "/etc/c.pem" };
	check_bad(a1, 3, "--tls-cert needs --tls-key");
	const char *a2[] = { "serve", "--tls-key", "/etc/k.pem" };
	check_bad(a2, 3, "--tls-key needs --tls-cert");
	const char *a3[] = { "serve", "--client-ca", "/etc/ca.pem" };
	check_bad(a3, 3, "--client-ca needs --tls-cert");
	const char *a4[] = { "serve", "--webhook-listen", ":8443", "--webhook-cert", "/c" };
	check_bad(a4, 5, "--webhook-listen needs --webhook-cert and --webhook-key");
}

/* What would fail later, at start, is refused with the command line: the addresses, the prefix. */
static void test_checked_before_start(void **state)
{
	(void)state;
	const char *a1[] = { "serve", "--url-prefix", "gpu" };
	check_bad(a1, 3, "--url-prefix: 'gpu' must start with '/'");
	const char *a2[] = { "serve", "--listen", "127.0.0.1:x" };
	check_bad(a2, 3, "--listen: '127.0.0.1:x' is not HOST:PORT");
	const char *a3[] = { "serve", "--debug-listen", "nowhere" };
	check_bad(a3, 3, "--debug-listen: 'nowhere' is not HOST:PORT");
	struct config c;
	config_defaults(&c);
	char err[256];
	const char *ok[] = { "serve", "--debug-listen", "", "--url-prefix", "/gpu" };
	assert_int_equal(parse(&c, 5, ok, err), 0);
}

/* "--flag false" as "--flag=false"; a bare boolean flag is true. */
static void test_bool_words(void **state)
{
	(void)state;
	struct config c;
	config_defaults(&c);
	char err[256];
	const char *a[] = { "serve", "--webhook-visible-devices-env", "false", "--log-json", "--insecure-skip-tls-verify", "true" };
	assert_int_equal(parse(&c, 6, a, err), 0);
	assert_false(c.webhook_env);
	assert_true(c.log_json);
	assert_true(c.insecure_skip_tls_verify);
}

/* Each number either says what 0 means or refuses it. */
static void test_zero(void **state)
{
	(void)state;
	const char *a1[] = { "serve", "--reap-interval", "0" };
	check_bad(a1, 3, "--reap-interval: '0' is not a number in 1..");
	const char *a2[] = { "serve", "--bind-timeout", "2" };   /* (a bind needs a second beside the margin) */
	check_bad(a2, 3, "--bind-timeout: '2' is not a number in 3..");
	const char *a3[] = { "serve", "--gang-timeout", "0" };
	check_bad(a3, 3, "--gang-timeout: '0' is not a number in 1..");
	const char *a4[] = { "serve", "--watch-idle-timeout", "0" };
	check_bad(a4, 3, "--watch-idle-timeout: '0' is not a number in 1..");
	const char *a5[] = { "serve", "--max-connections", "0" };
	check_bad(a5, 3, "--max-connections: '0' is not a number in 1..");
	struct config c;
	config_defaults(&c);
	char err[256];
	const char *ok[] = { "serve", "--threads", "0", "--filter-keeps-best", "0", "--tls-reload-interval", "0",
			     "--max-connections-per-address", "0", "--bind-threads", "0" };
	assert_int_equal(parse(&c, 11, ok, err), 0);
	/* --help says what 0 means for those that take it. */
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	config_usage(f);
	fclose(f);
	assert_non_null(strstr(text, "0: the number of CPUs"));
	assert_non_null(strstr(text, "0: no limit per address"));
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_file_then_flags),
		cmocka_unit_test(test_json_file),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_help),
		cmocka_unit_test(test_listen_split),
		cmocka_unit_test(test_tls_pairs),
		cmocka_unit_test(test_checked_before_start),
		cmocka_unit_test(test_bool_words),
		cmocka_unit_test(test_zero),
	};
	return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
