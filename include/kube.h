/*
 * kube: a small Kubernetes API client over libcurl. Auth from a kubeconfig
 * (bearer token, token file, client certificate, CA, current-context or a
 * named context) or in-cluster (service-account token re-read when it
 * rotates, CA bundle, KUBERNETES_SERVICE_HOST/PORT). TLS verification is
 * always on unless insecure is set (which logs a warning).
 *
 * A client is thread-safe: a call takes an idle curl handle from the
 * client's pool, with the connections it opened, and gives it back; no two
 * calls use a handle or its connections at once (libcurl does not support a
 * connection cache shared by concurrent threads).
 */
#ifndef GPU_KUBE_H
#define GPU_KUBE_H

#include "buf.h"

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#define KUBE_PATH_MAX 1024

struct kube_config {
	char server[512];             /* https://host:port, no trailing slash */
	char ca_file[KUBE_PATH_MAX];  /* or ca_pem */
	struct buf ca_pem;
	char token[4096];             /* static bearer token, or token_file */
	char token_file[KUBE_PATH_MAX];
	char cert_file[KUBE_PATH_MAX];   /* client certificate: files or PEM data */
	char key_file[KUBE_PATH_MAX];
	struct buf cert_pem, key_pem;
	char namespace[64];           /* the context's namespace, or the pod's */
	bool insecure;
};

void kube_config_init(struct kube_config *cfg);
void kube_config_release(struct kube_config *cfg);
/* From a kubeconfig file; context NULL or "" means current-context. */
int kube_config_load(struct kube_config *cfg, const char *path, const char *context,
		     char *err, size_t errlen);
/* From the pod's service account (/var/run/secrets/kubernetes.io/serviceaccount). */
int kube_config_in_cluster(struct kube_config *cfg, char *err, size_t errlen);

struct kube_client;

/* Copies what it needs from cfg. NULL with err on failure. */
struct kube_client *kube_client_new(const struct kube_config *cfg, char *err, size_t errlen);
void kube_client_free(struct kube_client *c);
const char *kube_client_namespace(const struct kube_client *c);

struct kube_response {
	long status;                  /* HTTP status; 0 if no answer came */
	struct buf body;
	long retry_after;             /* seconds from Retry-After, or 0 */
};

void kube_response_init(struct kube_response *r);
void kube_response_release(struct kube_response *r);

/*
 * One request. body may be NULL; content_type defaults to application/json.
 * Returns 0 when the server answered (look at r->status), -1 with err when
 * it could not be reached. timeout_s 0 means 30 s.
 */
int kube_request(struct kube_client *c, const char *method, const char *path, const char *body,
		 const char *content_type, long timeout_s, struct kube_response *r,
		 char *err, size_t errlen);

/*
 * The request layer under kube_request, for a simulation of the API server
 * (test/dst): a client made with kube_client_new_transport hands every
 * request to fn, with kube_request's contract, instead of libcurl. Its
 * kube_watch fails at once: a simulation feeds the watches' sinks itself.
 */
typedef int (*kube_transport_fn)(void *ctx, const char *method, const char *path, const char *body,
				 const char *content_type, long timeout_s, struct kube_response *r,
				 char *err, size_t errlen);
struct kube_client *kube_client_new_transport(kube_transport_fn fn, void *ctx);

/* The "message" of a Status body, or the body itself, for log lines. */
const char *kube_status_message(const struct kube_response *r, char *out, size_t size);

/*
 * GET of one object: its JSON (the caller cJSON_Deletes it), or NULL with
 * err ("<what>: HTTP 404: <message>", or why the server was not reached).
 */
cJSON *kube_get_object(struct kube_client *c, const char *path, const char *what, char *err, size_t errlen);

/* What a watch stream is handed. */
struct kube_watch_ops {
	/* One event {"type":..,"object":..}; return nonzero to end the watch. */
	int (*event)(void *ctx, const cJSON *event);
	/* After the events that arrived together (one read): a place to publish. */
	void (*flush)(void *ctx);
	void *ctx;
	/* The longest the stream may stay silent (no byte, bookmarks included); 0: no bound. */
	int idle_s;
};

/*
 * Streams a watch (path includes ?watch=1&...). Returns when the server
 * ends the stream, an ops.event returns nonzero, *stop becomes true, or the
 * connection fails. *status gets the HTTP status (a non-200 body is put in
 * err). Returns 0 on a clean end, KUBE_WATCH_SILENT when no byte came for
 * ops.idle_s (a half-open connection, a stuck server: the caller watches
 * again on a new connection), -1 otherwise.
 */
#define KUBE_WATCH_SILENT (-2)
int kube_watch(struct kube_client *c, const char *path, const struct kube_watch_ops *ops,
	       atomic_bool *stop, long *status, char *err, size_t errlen);

/*
 * The watch stream's framing without the socket (kube_watch feeds it each
 * read; test/fuzz/fuzz_watch.c feeds it chunks cut anywhere): one JSON
 * event per line, a line may span reads. Each complete line goes to
 * ops->event (a line that is not JSON is skipped with a warning), then
 * ops->flush once per feed that delivered any.
 */
struct kube_watch_parser {
	const struct kube_watch_ops *ops;
	struct buf line;              /* the event being received, capped at max_event */
	bool ended_by_consumer;       /* an ops->event returned nonzero */
	bool overflow;                /* an event passed max_event */
};
void kube_watch_parser_init(struct kube_watch_parser *p, const struct kube_watch_ops *ops, size_t max_event);
void kube_watch_parser_release(struct kube_watch_parser *p);
/* The next len bytes of the stream. 0 to go on; -1 once it has ended (consumer or overflow). */
int kube_watch_parser_feed(struct kube_watch_parser *p, const char *data, size_t len);

/*
 * Whether the API server currently refuses our credentials (401) or RBAC
 * (403): several watches meet one refusal, and one of them should say so.
 * kube_client_auth_refused() returns true for the first report of a streak;
 * kube_client_auth_ok() ends the streak.
 */
bool kube_client_auth_refused(struct kube_client *c, long status);
void kube_client_auth_ok(struct kube_client *c);

/* Appends s to out with URL query escaping. */
int kube_escape(struct buf *out, const char *s);

#endif
