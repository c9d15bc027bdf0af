/* Where the API server is and who we are: kubeconfig and in-cluster auth. */
#include "base64.h"
#include "kube.h"
#include "log.h"
#include "yamljson.h"

#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

void kube_config_init(struct kube_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	buf_init(&cfg->ca_pem, 1 << 20);
	buf_init(&cfg->cert_pem, 1 << 20);
	buf_init(&cfg->key_pem, 1 << 20);
}

void kube_config_release(struct kube_config *cfg)
{
	buf_release(&cfg->ca_pem);
	buf_release(&cfg->cert_pem);
	buf_release(&cfg->key_pem);
	kube_config_init(cfg);
}

/* The entry of a kubeconfig list (clusters, users, contexts) with that name. */
static const cJSON *named(const cJSON *root, const char *list, const char *name, const char *inner)
{
	const cJSON *it;
	cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(root, list)) {
		const cJSON *n = cJSON_GetObjectItemCaseSensitive(it, "name");
		if (cJSON_IsString(n) && !strcmp(n->valuestring, name))
			return cJSON_GetObjectItemCaseSensitive(it, inner);
	}
	return NULL;
}

static const char *str(const cJSON *obj, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A path from the kubeconfig: relative ones are relative to its directory. */
static int set_path(char *dst, size_t size, const char *dir, const char *path)
{
	int n = path[0] == '/' ? snprintf(dst, size, "%s", path) : snprintf(dst, size, "%s/%s", dir, path);
	return n < 0 || (size_t)n >= size ? -1 : 0;
}

static int set_data(struct buf *dst, const char *b64, const char *what, char *err, size_t errlen)
{
	buf_clear(dst);
	if (base64_decode(b64, dst)) {
		snprintf(err, errlen, "%s is not valid base64", what);
		return -1;
	}
	return 0;
}

int kube_config_load(struct kube_config *cfg, const char *path, const char *context,
		     char *err, size_t errlen)
{
	cJSON *root = yamljson_load(path, 4 << 20, err, errlen);
	if (!root)
		return -1;
	char dirbuf[KUBE_PATH_MAX];
	snprintf(dirbuf, sizeof(dirbuf), "%s", path);
	const char *dir = dirname(dirbuf);
	int rc = -1;
	const char *ctx_name = context && *context ? context : str(root, "current-context");
	const cJSON *ctx = ctx_name ? named(root, "contexts", ctx_name, "context") : NULL;
	if (!ctx) {
		snprintf(err, errlen, "%s: no context %s", path, ctx_name ? ctx_name : "(current-context is not set)");
		goto out;
	}
	const char *cluster_name = str(ctx, "cluster"), *user_name = str(ctx, "user");
	const cJSON *cluster = cluster_name ? named(root, "clusters", cluster_name, "cluster") : NULL;
	const cJSON *user = user_name ? named(root, "users", user_name, "user") : NULL;
	if (!cluster || !str(cluster, "server")) {
		snprintf(err, errlen, "%s: context %s has no cluster with a server", path, ctx_name);
		goto out;
	}
	snprintf(cfg->server, sizeof(cfg->server), "%s", str(cluster, "server"));
	size_t sl = strlen(cfg->server);
	while (sl && cfg->server[sl - 1] == '/')
		cfg->server[--sl] = '\0';
	if (str(ctx, "namespace"))
		snprintf(cfg->namespace, sizeof(cfg->namespace), "%s", str(ctx, "namespace"));
	const cJSON *insecure = cJSON_GetObjectItemCaseSensitive(cluster, "insecure-skip-tls-verify");
	cfg->insecure = cJSON_IsTrue(insecure);
	const char *v;
	/* libcurl checks the certificate against the server's own host name only. */
	if (str(cluster, "tls-server-name"))
		log_warn("the kubeconfig's tls-server-name is not applied; the certificate must name the server",
			 "kubeconfig=%s server=%s", path, cfg->server);
	if ((v = str(cluster, "certificate-authority-data")) &&
	    set_data(&cfg->ca_pem, v, "certificate-authority-data", err, errlen))
		goto out;
	if ((v = str(cluster, "certificate-authority")) && set_path(cfg->ca_file, sizeof(cfg->ca_file), dir, v))
		goto toolong;
	if (user) {
		if ((v = str(user, "token")))
			snprintf(cfg->token, sizeof(cfg->token), "%s", v);
		if ((v = str(user, "tokenFile")) && set_path(cfg->token_file, sizeof(cfg->token_file), dir, v))
			goto toolong;
		if ((v = str(user, "client-certificate-data")) &&
		    set_data(&cfg->cert_pem, v, "client-certificate-data", err, errlen))
			goto out;
		if ((v = str(user, "client-key-data")) &&
		    set_data(&cfg->key_pem, v, "client-key-data", err, errlen))
			goto out;
		if ((v = str(user, "client-certificate")) &&
		    set_path(cfg->cert_file, sizeof(cfg->cert_file), dir, v))
			goto toolong;
		if ((v = str(user, "client-key")) && set_path(cfg->key_file, sizeof(cfg->key_file), dir, v))
			goto toolong;
		if (cJSON_GetObjectItemCaseSensitive(user, "exec") || cJSON_GetObjectItemCaseSensitive(user, "auth-provider")) {
			snprintf(err, errlen, "%s: user %s uses an exec/auth-provider plugin, which is not supported; use a token or a client certificate",
				 path, user_name);
			goto out;
		}
	}
	rc = 0;
	goto out;
toolong:
	snprintf(err, errlen, "%s: a file path is too long", path);
out:
	cJSON_Delete(root);
	return rc;
}

static int read_small_file(const char *path, char *dst, size_t size)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	size_t n = fread(dst, 1, size - 1, f);
	fclose(f);
	dst[n] = '\0';
	while (n && (dst[n - 1] == '\n' || dst[n - 1] == '\r' || dst[n - 1] == ' '))
		dst[--n] = '\0';
	return 0;
}

int kube_config_in_cluster(struct kube_config *cfg, char *err, size_t errlen)
{
	const char *host = getenv("KUBERNETES_SERVICE_HOST"), *port = getenv("KUBERNETES_SERVICE_PORT");
	if (!host || !port) {
		snprintf(err, errlen, "not running in a cluster (KUBERNETES_SERVICE_HOST/PORT unset); use --kubeconfig");
		return -1;
	}
	/* IPv6 service addresses need brackets. */
	bool v6 = strchr(host, ':') != NULL;
	snprintf(cfg->server, sizeof(cfg->server), v6 ? "https://[%s]:%s" : "https://%s:%s", host, port);
	snprintf(cfg->token_file, sizeof(cfg->token_file), "%s/token", SA_DIR);
	snprintf(cfg->ca_file, sizeof(cfg->ca_file), "%s/ca.crt", SA_DIR);
	char probe[8];
	if (read_small_file(cfg->token_file, probe, sizeof(probe))) {
		snprintf(err, errlen, "cannot read the service-account token %s: %s", cfg->token_file, strerror(errno));
		return -1;
	}
	read_small_file(SA_DIR "/namespace", cfg->namespace, sizeof(cfg->namespace));
	return 0;
}
