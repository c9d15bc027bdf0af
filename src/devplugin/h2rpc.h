/*
 * h2rpc: gRPC over cleartext HTTP/2 (h2c, prior knowledge) on unix
 * sockets, on top of nghttp2: the transport of the kubelet APIs the node
 * agent speaks (device plugin, registration, PodResources). Only what those
 * need: unary and server-streaming calls, protobuf messages as opaque
 * bytes (the callers encode them with protobuf-c), no compression, no TLS.
 *
 * The server is driven by one thread: h2rpc_serve() polls the listening
 * sockets and connections, and calls ops->request for each complete
 * request on that same thread. The request is answered then or later (a
 * ListAndWatch stream stays open) through its h2rpc_ref, a (connection,
 * stream) handle that stays safe to use after the stream is gone: calls on
 * a gone stream return H2RPC_EGONE. Only h2rpc_wake() may be called from
 * another thread.
 *
 * The client is one blocking unary call per connection (kubelet's
 * Registration and PodResources are called rarely).
 *
 * The wire format (PROTOCOL-HTTP2 of gRPC): request HEADERS (:method POST,
 * :path /package.Service/Method, content-type application/grpc), DATA of
 * length-prefixed messages (1 byte compressed flag, 4 bytes big-endian
 * length), response HEADERS (:status 200), DATA, and trailers carrying
 * grpc-status and grpc-message (percent-encoded).
 */
#ifndef GPU_H2RPC_H
#define GPU_H2RPC_H

#include "buf.h"

#include <stddef.h>
#include <stdint.h>

/* gRPC status codes used here. */
enum h2rpc_status {
	H2RPC_OK = 0,
	H2RPC_INVALID_ARGUMENT = 3,
	H2RPC_NOT_FOUND = 5,
	H2RPC_RESOURCE_EXHAUSTED = 8,
	H2RPC_FAILED_PRECONDITION = 9,
	H2RPC_UNIMPLEMENTED = 12,
	H2RPC_INTERNAL = 13,
	H2RPC_UNAVAILABLE = 14,
};

#define H2RPC_EGONE (-2)          /* the stream or its connection is closed */
#define H2RPC_MAX_MESSAGE ((size_t)16 << 20)

/* A request's stream: connection id (never reused) and HTTP/2 stream id. */
struct h2rpc_ref {
	uint32_t conn;
	int32_t stream;
};

struct h2rpc_request {
	int listener;                 /* the id h2rpc_listen() returned */
	const char *path;             /* "/v1beta1.DevicePlugin/Allocate" */
	const uint8_t *msg;           /* the request message, framing removed */
	size_t len;
	struct h2rpc_ref ref;
};

struct h2rpc_server_ops {
	/* A whole request arrived: answer it now or later through req->ref. */
	void (*request)(void *ctx, const struct h2rpc_request *req);
	/* A dispatched stream closed before it was finished (peer went away). */
	void (*closed)(void *ctx, struct h2rpc_ref ref);
	void *ctx;
};

struct h2rpc_server;

/* NULL when out of memory or no eventfd could be made. */
struct h2rpc_server *h2rpc_server_new(const struct h2rpc_server_ops *ops);
/* Closes every listener and connection (without calling ops) and frees s. */
void h2rpc_server_free(struct h2rpc_server *s);

/*
 * Listens on a unix socket at path (a stale socket file there is removed
 * first). Returns a listener id >= 0, or -1 with err.
 */
int h2rpc_listen(struct h2rpc_server *s, const char *path, char *err, size_t errlen);
/*
 * Closes a listener and every connection it accepted (their open streams
 * go without ops->closed). The socket file is removed if it is still the
 * one we made (same inode): a kubelet that already wiped it may have put
 * something else there.
 */
void h2rpc_unlisten(struct h2rpc_server *s, int listener);
/* Whether the listener's socket file is still on disk as we made it. */
int h2rpc_listener_intact(const struct h2rpc_server *s, int listener);

/*
 * One round: waits up to timeout_ms for sockets or h2rpc_wake(), accepts,
 * reads, dispatches complete requests, writes. 0, or -1 when poll failed.
 */
int h2rpc_serve(struct h2rpc_server *s, int timeout_ms);
/* Makes a running or the next h2rpc_serve() return at once. Any thread. */
void h2rpc_wake(struct h2rpc_server *s);

/*
 * One message of the answer (the response headers go first, once); the
 * stream stays open. 0, H2RPC_EGONE, or -1 (too big, out of memory).
 */
int h2rpc_send(struct h2rpc_server *s, struct h2rpc_ref ref, const uint8_t *msg, size_t len);
/* Ends the answer with grpc-status (and grpc-message when not NULL). */
int h2rpc_finish(struct h2rpc_server *s, struct h2rpc_ref ref, enum h2rpc_status status,
		 const char *message);
/* A unary answer: one message, then status OK. */
int h2rpc_reply(struct h2rpc_server *s, struct h2rpc_ref ref, const uint8_t *msg, size_t len);

/*
 * The client: one unary call to the server on the unix socket at socket_path.
 * Returns 0 with the answer's message in resp (cap H2RPC_MAX_MESSAGE);
 * -1 with err when the call did not complete (no server, timeout, broken
 * stream, a malformed answer); or the gRPC status (> 0) the server
 * answered, with its grpc-message in err.
 */
int h2rpc_call(const char *socket_path, const char *path, const uint8_t *req, size_t len,
	       struct buf *resp, int timeout_ms, char *err, size_t errlen);

/* ---- pure helpers (exposed for tests) ---- */

/* Appends one length-prefixed gRPC message. 0 or a BUF_ error. */
int h2rpc_frame(struct buf *out, const uint8_t *msg, size_t len);
/*
 * The one message in data[0, n): 0 with *msg and *len pointing into data, or
 * -1 with err (short, compressed, trailing bytes, more than one message).
 */
int h2rpc_unframe(const uint8_t *data, size_t n, const uint8_t **msg, size_t *len,
		  char *err, size_t errlen);
/* grpc-message encoding: bytes outside printable ASCII and '%' as %XX. */
void h2rpc_pct_encode(const char *in, char *out, size_t size);
void h2rpc_pct_decode(const char *in, size_t n, char *out, size_t size);

#endif
