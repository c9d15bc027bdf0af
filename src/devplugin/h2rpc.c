/*
 * gRPC over h2c on unix sockets, on nghttp2 (see h2rpc.h).
 *
 * nghttp2 does the HTTP/2 framing, HPACK and flow control; this file adds
 * the sockets, the poll loop and gRPC's message framing and status
 * trailers. nghttp2 calls back into us while it reads and writes, and
 * must not be re-entered from those callbacks, so application code is
 * never called from inside nghttp2: complete requests and closed streams
 * are queued and handed to the application between nghttp2 calls, and the
 * application's answers are only submitted (written out at the next flush).
 */
#include "h2rpc.h"

#include "clock.h"
#include "strnum.h"

#include <errno.h>
#include <fcntl.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MAX_LISTENERS 8
#define MAX_CONNS 64
#define MAX_REQUEST ((size_t)4 << 20)
#define PATH_LEN 160
#define READ_CHUNK 16384

/* ---- framing and percent-encoding (pure) ---------------------------------- */

int h2rpc_frame(struct buf *out, const uint8_t *msg, size_t len)
{
	if (len > UINT32_MAX)
		return BUF_ETOOBIG;
	uint8_t hdr[5] = { 0, (uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len };
	int rc = buf_add(out, hdr, sizeof(hdr));
	return rc ? rc : len ? buf_add(out, msg, len) : 0;
}

int h2rpc_unframe(const uint8_t *data, size_t n, const uint8_t **msg, size_t *len, char *err,
		  size_t errlen)
{
	*msg = data;
	*len = 0;
	if (n == 0)
		return 0;                     /* no frame at all: an empty message */
	if (n < 5) {
		snprintf(err, errlen, "message frame cut short (%zu bytes)", n);
		return -1;
	}
	if (data[0] != 0) {
		snprintf(err, errlen, "compressed messages are not supported");
		return -1;
	}
	size_t l = (size_t)data[1] << 24 | (size_t)data[2] << 16 | (size_t)data[3] << 8 | data[4];
	if (l != n - 5) {
		snprintf(err, errlen, "message frame says %zu bytes, %zu came", l, n - 5);
		return -1;
	}
	*msg = data + 5;
	*len = l;
	return 0;
}

void h2rpc_pct_encode(const char *in, char *out, size_t size)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;
	for (const unsigned char *p = (const unsigned char *)in; *p && o + 4 <= size; p++) {
		if (*p >= 0x20 && *p <= 0x7e && *p != '%') {
			out[o++] = (char)*p;
		} else {
			out[o++] = '%';
			out[o++] = hex[*p >> 4];
			out[o++] = hex[*p & 15];
		}
	}
	if (size)
		out[o < size ? o : size - 1] = '\0';
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
		: c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

void h2rpc_pct_decode(const char *in, size_t n, char *out, size_t size)
{
	size_t o = 0;
	for (size_t i = 0; i < n && o + 1 < size; i++) {
		int hi, lo;
		if (in[i] == '%' && i + 2 < n && (hi = hexval(in[i + 1])) >= 0 && (lo = hexval(in[i + 2])) >= 0) {
			out[o++] = (char)(hi << 4 | lo);
			i += 2;
		} else {
			out[o++] = in[i];
		}
	}
	if (size)
		out[o] = '\0';
}

/* ---- sockets ---------------------------------------------------------------- */

static int unix_addr(struct sockaddr_un *sa, const char *path, char *err, size_t errlen)
{
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(sa->sun_path)) {
		snprintf(err, errlen, "%s: socket path too long", path);
		return -1;
	}
	memcpy(sa->sun_path, path, strlen(path) + 1);
	return 0;
}

/* Writes what nghttp2 has to send; would-block is not an error. */
static ssize_t fd_send(int fd, const uint8_t *data, size_t length)
{
	ssize_t w;
	do {
		w = send(fd, data, length, MSG_NOSIGNAL);
	} while (w < 0 && errno == EINTR);
	if (w < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK ? NGHTTP2_ERR_WOULDBLOCK
			: NGHTTP2_ERR_CALLBACK_FAILURE;
	return w;
}

/* Feeds what is readable into the session: 1 more may come, 0 EOF, -1 error. */
static int fd_recv_into(int fd, nghttp2_session *ng)
{
	uint8_t chunk[READ_CHUNK];
	for (;;) {
		ssize_t r = recv(fd, chunk, sizeof(chunk), 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK ? 1 : -1;
		if (r == 0)
			return 0;
		if (nghttp2_session_mem_recv(ng, chunk, (size_t)r) < 0)
			return -1;
	}
}

/* ---- server state -------------------------------------------------------------- */

struct stream {
	struct stream *next;
	int32_t id;
	char path[PATH_LEN];
	bool grpc_content;           /* content-type application/grpc[+proto] */
	bool too_big;
	bool ready;                  /* the request ended; not yet dispatched */
	bool dispatched;
	bool headers_sent;           /* response HEADERS submitted */
	bool finishing;              /* trailers are due once out is drained */
	bool finished;               /* trailers (or a trailers-only answer) submitted */
	bool deferred;               /* the data source said "later" */
	enum h2rpc_status status;
	char message[256];
	struct buf in;               /* the request body, framed */
	struct buf out;              /* framed answer messages not yet taken by nghttp2 */
	size_t out_off;
};

struct conn {
	int fd;
	int listener;
	uint32_t id;
	bool dead;
	nghttp2_session *ng;
	struct stream *streams;
	struct h2rpc_server *srv;
};

struct listener {
	int fd;                      /* -1: slot free */
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	dev_t dev;
	ino_t ino;
};

struct h2rpc_server {
	struct h2rpc_server_ops ops;
	int wake_fd;
	struct listener lis[MAX_LISTENERS];
	struct conn *conns[MAX_CONNS];
	uint32_t next_conn;
	struct h2rpc_ref *closed;    /* streams closed inside nghttp2, to report */
	size_t nclosed, closed_alloc;
};

static struct stream *stream_find(struct conn *c, int32_t id)
{
	for (struct stream *s = c->streams; s; s = s->next)
		if (s->id == id)
			return s;
	return NULL;
}

static void stream_free(struct stream *s)
{
	buf_release(&s->in);
	buf_release(&s->out);
	free(s);
}

static void queue_closed(struct h2rpc_server *srv, struct h2rpc_ref ref)
{
	if (srv->nclosed == srv->closed_alloc) {
		size_t n = srv->closed_alloc ? srv->closed_alloc * 2 : 16;
		struct h2rpc_ref *p = realloc(srv->closed, n * sizeof(*p));
		if (!p)
			return;              /* the application keeps a stale ref: its sends get EGONE */
		srv->closed = p;
		srv->closed_alloc = n;
	}
	srv->closed[srv->nclosed++] = ref;
}

static void deliver_closed(struct h2rpc_server *srv)
{
	/* Handlers may queue more while we report: take them one at a time. */
	while (srv->nclosed) {
		struct h2rpc_ref ref = srv->closed[--srv->nclosed];
		if (srv->ops.closed)
			srv->ops.closed(srv->ops.ctx, ref);
	}
}

static struct conn *conn_by_id(struct h2rpc_server *srv, uint32_t id)
{
	for (int i = 0; i < MAX_CONNS; i++)
		if (srv->conns[i] && srv->conns[i]->id == id && !srv->conns[i]->dead)
			return srv->conns[i];
	return NULL;
}

/* ---- nghttp2 server callbacks ----------------------------------------------- */

static ssize_t cb_send(nghttp2_session *ng, const uint8_t *data, size_t length, int flags, void *user)
{
	(void)ng;
	(void)flags;
	return fd_send(((struct conn *)user)->fd, data, length);
}

static int cb_begin_headers(nghttp2_session *ng, const nghttp2_frame *frame, void *user)
{
	struct conn *c = user;
	if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	struct stream *s = calloc(1, sizeof(*s));
	if (!s)
		return nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
						 NGHTTP2_INTERNAL_ERROR) ? NGHTTP2_ERR_CALLBACK_FAILURE : 0;
	s->id = frame->hd.stream_id;
	buf_init(&s->in, MAX_REQUEST);
	buf_init(&s->out, H2RPC_MAX_MESSAGE + 5);
	s->next = c->streams;
	c->streams = s;
	return 0;
}

static int cb_header(nghttp2_session *ng, const nghttp2_frame *frame, const uint8_t *name, size_t namelen,
		     const uint8_t *value, size_t valuelen, uint8_t flags, void *user)
{
	(void)ng;
	(void)flags;
	struct stream *s = stream_find(user, frame->hd.stream_id);
	if (!s || frame->hd.type != NGHTTP2_HEADERS)
		return 0;
	if (namelen == 5 && !memcmp(name, ":path", 5)) {
		size_t n = valuelen < PATH_LEN - 1 ? valuelen : PATH_LEN - 1;
		memcpy(s->path, value, n);
		s->path[n] = '\0';
	} else if (namelen == 12 && !memcmp(name, "content-type", 12)) {
		s->grpc_content = valuelen >= 16 && !memcmp(value, "application/grpc", 16);
	}
	return 0;
}

static int cb_data_chunk(nghttp2_session *ng, uint8_t flags, int32_t stream_id, const uint8_t *data,
			 size_t len, void *user)
{
	(void)ng;
	(void)flags;
	struct stream *s = stream_find(user, stream_id);
	if (s && !s->too_big && buf_add(&s->in, data, len))
		s->too_big = true;        /* answered RESOURCE_EXHAUSTED when the request ends */
	return 0;
}

static int cb_frame_recv(nghttp2_session *ng, const nghttp2_frame *frame, void *user)
{
	(void)ng;
	if ((frame->hd.type == NGHTTP2_DATA || frame->hd.type == NGHTTP2_HEADERS) &&
	    (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
		struct stream *s = stream_find(user, frame->hd.stream_id);
		if (s && !s->dispatched)
			s->ready = true;
	}
	return 0;
}

static int cb_stream_close(nghttp2_session *ng, int32_t stream_id, uint32_t error_code, void *user)
{
	(void)ng;
	(void)error_code;
	struct conn *c = user;
	for (struct stream **pp = &c->streams; *pp; pp = &(*pp)->next) {
		struct stream *s = *pp;
		if (s->id != stream_id)
			continue;
		*pp = s->next;
		if (s->dispatched && !s->finished)
			queue_closed(c->srv, (struct h2rpc_ref){ c->id, s->id });
		stream_free(s);
		break;
	}
	return 0;
}

/* The answer's DATA: what is queued; trailers once drained and finishing. */
static ssize_t read_out(nghttp2_session *ng, int32_t stream_id, uint8_t *dst, size_t length,
			uint32_t *data_flags, nghttp2_data_source *source, void *user)
{
	(void)user;
	struct stream *s = source->ptr;
	size_t left = s->out.len - s->out_off;
	size_t n = left < length ? left : length;
	if (n) {
		memcpy(dst, s->out.data + s->out_off, n);
		s->out_off += n;
		if (s->out_off == s->out.len) {
			buf_clear(&s->out);
			s->out_off = 0;
		}
		return (ssize_t)n;
	}
	if (!s->finishing) {
		s->deferred = true;
		return NGHTTP2_ERR_DEFERRED;
	}
	char status[12], msg[sizeof(s->message) * 3];
	snprintf(status, sizeof(status), "%d", (int)s->status);
	h2rpc_pct_encode(s->message, msg, sizeof(msg));
	nghttp2_nv tr[2] = {
		{ (uint8_t *)"grpc-status", (uint8_t *)status, 11, strlen(status), NGHTTP2_NV_FLAG_NONE },
		{ (uint8_t *)"grpc-message", (uint8_t *)msg, 12, strlen(msg), NGHTTP2_NV_FLAG_NONE },
	};
	*data_flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
	if (nghttp2_submit_trailer(ng, stream_id, tr, msg[0] ? 2 : 1))
		*data_flags &= ~(uint32_t)NGHTTP2_DATA_FLAG_NO_END_STREAM;   /* at least end the stream */
	s->finished = true;
	return 0;
}

/* ---- connections ---------------------------------------------------------------- */

static int conn_new(struct h2rpc_server *srv, int fd, int listener)
{
	int slot = -1;
	for (int i = 0; i < MAX_CONNS && slot < 0; i++)
		if (!srv->conns[i])
			slot = i;
	struct conn *c = slot >= 0 ? calloc(1, sizeof(*c)) : NULL;
	if (!c)
		return -1;
	c->fd = fd;
	c->listener = listener;
	c->id = ++srv->next_conn;
	c->srv = srv;
	nghttp2_session_callbacks *cbs;
	if (nghttp2_session_callbacks_new(&cbs)) {
		free(c);
		return -1;
	}
	nghttp2_session_callbacks_set_send_callback(cbs, cb_send);
	nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, cb_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(cbs, cb_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, cb_data_chunk);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, cb_frame_recv);
	nghttp2_session_callbacks_set_on_stream_close_callback(cbs, cb_stream_close);
	int rc = nghttp2_session_server_new(&c->ng, cbs, c);
	nghttp2_session_callbacks_del(cbs);
	nghttp2_settings_entry iv[] = { { NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 100 } };
	if (rc || nghttp2_submit_settings(c->ng, NGHTTP2_FLAG_NONE, iv, 1)) {
		if (!rc)
			nghttp2_session_del(c->ng);
		free(c);
		return -1;
	}
	srv->conns[slot] = c;
	return 0;
}

/* Closes c; streams the application still holds are reported closed. */
static void conn_close(struct h2rpc_server *srv, int slot, bool report)
{
	struct conn *c = srv->conns[slot];
	srv->conns[slot] = NULL;
	while (c->streams) {
		struct stream *s = c->streams;
		c->streams = s->next;
		if (report && s->dispatched && !s->finished)
			queue_closed(srv, (struct h2rpc_ref){ c->id, s->id });
		stream_free(s);
	}
	nghttp2_session_del(c->ng);
	close(c->fd);
	free(c);
}

static void conn_flush(struct conn *c)
{
	if (!c->dead && nghttp2_session_send(c->ng))
		c->dead = true;
	if (!nghttp2_session_want_read(c->ng) && !nghttp2_session_want_write(c->ng))
		c->dead = true;
}

/* Submits the response headers with the data source, once. */
static int stream_start(struct conn *c, struct stream *s)
{
	if (s->headers_sent)
		return 0;
	nghttp2_nv hdrs[] = {
		{ (uint8_t *)":status", (uint8_t *)"200", 7, 3, NGHTTP2_NV_FLAG_NONE },
		{ (uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16, NGHTTP2_NV_FLAG_NONE },
	};
	nghttp2_data_provider prd = { .source.ptr = s, .read_callback = read_out };
	if (nghttp2_submit_response(c->ng, s->id, hdrs, 2, &prd))
		return -1;
	s->headers_sent = true;
	return 0;
}

/* A trailers-only answer: the status in the response headers, stream ended. */
static int stream_fail_fast(struct conn *c, struct stream *s)
{
	char status[12], msg[sizeof(s->message) * 3];
	snprintf(status, sizeof(status), "%d", (int)s->status);
	h2rpc_pct_encode(s->message, msg, sizeof(msg));
	nghttp2_nv hdrs[] = {
		{ (uint8_t *)":status", (uint8_t *)"200", 7, 3, NGHTTP2_NV_FLAG_NONE },
		{ (uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16, NGHTTP2_NV_FLAG_NONE },
		{ (uint8_t *)"grpc-status", (uint8_t *)status, 11, strlen(status), NGHTTP2_NV_FLAG_NONE },
		{ (uint8_t *)"grpc-message", (uint8_t *)msg, 12, strlen(msg), NGHTTP2_NV_FLAG_NONE },
	};
	s->headers_sent = s->finished = true;
	return nghttp2_submit_response(c->ng, s->id, hdrs, msg[0] ? 4 : 3, NULL) ? -1 : 0;
}

static void stream_resume(struct conn *c, struct stream *s)
{
	if (s->deferred) {
		s->deferred = false;
		nghttp2_session_resume_data(c->ng, s->id);
	}
}

static struct stream *ref_stream(struct h2rpc_server *srv, struct h2rpc_ref ref, struct conn **cp)
{
	struct conn *c = conn_by_id(srv, ref.conn);
	struct stream *s = c ? stream_find(c, ref.stream) : NULL;
	*cp = c;
	return s && !s->finishing && !s->finished ? s : NULL;
}

int h2rpc_send(struct h2rpc_server *srv, struct h2rpc_ref ref, const uint8_t *msg, size_t len)
{
	struct conn *c;
	struct stream *s = ref_stream(srv, ref, &c);
	if (!s)
		return H2RPC_EGONE;
	if (len > H2RPC_MAX_MESSAGE || h2rpc_frame(&s->out, msg, len))
		return -1;
	if (stream_start(c, s))
		return -1;
	stream_resume(c, s);
	return 0;
}

int h2rpc_finish(struct h2rpc_server *srv, struct h2rpc_ref ref, enum h2rpc_status status, const char *message)
{
	struct conn *c;
	struct stream *s = ref_stream(srv, ref, &c);
	if (!s)
		return H2RPC_EGONE;
	s->status = status;
	snprintf(s->message, sizeof(s->message), "%s", message ? message : "");
	if (!s->headers_sent)
		return stream_fail_fast(c, s);
	s->finishing = true;
	stream_resume(c, s);
	return 0;
}

int h2rpc_reply(struct h2rpc_server *srv, struct h2rpc_ref ref, const uint8_t *msg, size_t len)
{
	int rc = h2rpc_send(srv, ref, msg, len);
	if (rc == -1) {
		h2rpc_finish(srv, ref, H2RPC_RESOURCE_EXHAUSTED, "answer too large");
		return -1;
	}
	return rc ? rc : h2rpc_finish(srv, ref, H2RPC_OK, NULL);
}

/* Hands complete requests of c to the application (which may answer at once). */
static void conn_dispatch(struct h2rpc_server *srv, struct conn *c)
{
	for (;;) {
		struct stream *s = c->streams;
		while (s && !s->ready)
			s = s->next;
		if (!s)
			return;
		s->ready = false;
		s->dispatched = true;
		struct h2rpc_ref ref = { c->id, s->id };
		const uint8_t *msg;
		size_t len;
		char err[128];
		if (s->too_big) {
			h2rpc_finish(srv, ref, H2RPC_RESOURCE_EXHAUSTED, "request larger than 4 MiB");
		} else if (!s->grpc_content) {
			h2rpc_finish(srv, ref, H2RPC_INVALID_ARGUMENT, "content-type must be application/grpc");
		} else if (h2rpc_unframe((const uint8_t *)s->in.data, s->in.len, &msg, &len, err, sizeof(err))) {
			h2rpc_finish(srv, ref, H2RPC_INVALID_ARGUMENT, err);
		} else {
			struct h2rpc_request req = { c->listener, s->path, msg, len, ref };
			srv->ops.request(srv->ops.ctx, &req);
		}
		if (conn_by_id(srv, ref.conn) != c)
			return;
	}
}

/* ---- server API --------------------------------------------------------------- */

struct h2rpc_server *h2rpc_server_new(const struct h2rpc_server_ops *ops)
{
	struct h2rpc_server *srv = calloc(1, sizeof(*srv));
	if (!srv)
		return NULL;
	srv->ops = *ops;
	srv->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (srv->wake_fd < 0) {
		free(srv);
		return NULL;
	}
	for (int i = 0; i < MAX_LISTENERS; i++)
		srv->lis[i].fd = -1;
	return srv;
}

void h2rpc_server_free(struct h2rpc_server *srv)
{
	if (!srv)
		return;
	for (int i = 0; i < MAX_LISTENERS; i++)
		if (srv->lis[i].fd >= 0)
			h2rpc_unlisten(srv, i);
	for (int i = 0; i < MAX_CONNS; i++)
		if (srv->conns[i])
			conn_close(srv, i, false);
	close(srv->wake_fd);
	free(srv->closed);
	free(srv);
}

int h2rpc_listen(struct h2rpc_server *srv, const char *path, char *err, size_t errlen)
{
	int slot = -1;
	for (int i = 0; i < MAX_LISTENERS && slot < 0; i++)
		if (srv->lis[i].fd < 0)
			slot = i;
	if (slot < 0) {
		snprintf(err, errlen, "too many listeners");
		return -1;
	}
	struct sockaddr_un sa;
	if (unix_addr(&sa, path, err, errlen))
		return -1;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	struct stat st;
	if (fd < 0 || (unlink(path) && errno != ENOENT) ||
	    bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 16) || stat(path, &st)) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	struct listener *l = &srv->lis[slot];
	l->fd = fd;
	snprintf(l->path, sizeof(l->path), "%s", path);
	l->dev = st.st_dev;
	l->ino = st.st_ino;
	return slot;
}

int h2rpc_listener_intact(const struct h2rpc_server *srv, int listener)
{
	if (listener < 0 || listener >= MAX_LISTENERS || srv->lis[listener].fd < 0)
		return 0;
	struct stat st;
	const struct listener *l = &srv->lis[listener];
	return !stat(l->path, &st) && S_ISSOCK(st.st_mode) && st.st_dev == l->dev && st.st_ino == l->ino;
}

void h2rpc_unlisten(struct h2rpc_server *srv, int listener)
{
	if (listener < 0 || listener >= MAX_LISTENERS || srv->lis[listener].fd < 0)
		return;
	if (h2rpc_listener_intact(srv, listener))
		unlink(srv->lis[listener].path);
	close(srv->lis[listener].fd);
	srv->lis[listener].fd = -1;
	for (int i = 0; i < MAX_CONNS; i++)
		if (srv->conns[i] && srv->conns[i]->listener == listener)
			conn_close(srv, i, false);
}

void h2rpc_wake(struct h2rpc_server *srv)
{
	uint64_t one = 1;
	ssize_t w = write(srv->wake_fd, &one, sizeof(one));
	(void)w;
}

static void flush_all(struct h2rpc_server *srv)
{
	for (int i = 0; i < MAX_CONNS; i++)
		if (srv->conns[i])
			conn_flush(srv->conns[i]);
	for (int i = 0; i < MAX_CONNS; i++)
		if (srv->conns[i] && srv->conns[i]->dead)
			conn_close(srv, i, true);
	deliver_closed(srv);
}

int h2rpc_serve(struct h2rpc_server *srv, int timeout_ms)
{
	flush_all(srv);     /* answers the application gave since the last round */
	struct pollfd pfd[1 + MAX_LISTENERS + MAX_CONNS];
	int who[1 + MAX_LISTENERS + MAX_CONNS];   /* <0: listener -1-i; >=0: conn slot */
	int n = 0;
	pfd[n] = (struct pollfd){ .fd = srv->wake_fd, .events = POLLIN };
	who[n++] = -100;
	for (int i = 0; i < MAX_LISTENERS; i++)
		if (srv->lis[i].fd >= 0) {
			pfd[n] = (struct pollfd){ .fd = srv->lis[i].fd, .events = POLLIN };
			who[n++] = -1 - i;
		}
	for (int i = 0; i < MAX_CONNS; i++) {
		struct conn *c = srv->conns[i];
		if (!c)
			continue;
		short ev = POLLIN;
		if (nghttp2_session_want_write(c->ng))
			ev |= POLLOUT;
		pfd[n] = (struct pollfd){ .fd = c->fd, .events = ev };
		who[n++] = i;
	}
	int pr = poll(pfd, (nfds_t)n, timeout_ms);
	if (pr < 0)
		return errno == EINTR ? 0 : -1;
	for (int k = 0; k < n && pr > 0; k++) {
		if (!pfd[k].revents)
			continue;
		if (who[k] == -100) {
			uint64_t v;
			ssize_t r = read(srv->wake_fd, &v, sizeof(v));
			(void)r;
		} else if (who[k] < 0) {
			int lis = -1 - who[k];
			int fd;
			while (srv->lis[lis].fd >= 0 &&
			       (fd = accept4(srv->lis[lis].fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0)
				if (conn_new(srv, fd, lis))
					close(fd);       /* out of slots or memory: the peer sees EOF */
		} else {
			struct conn *c = srv->conns[who[k]];
			if (!c || c->fd != pfd[k].fd)
				continue;         /* closed (or its slot reused) by a handler meanwhile */
			if (pfd[k].revents & (POLLIN | POLLHUP | POLLERR)) {
				if (fd_recv_into(c->fd, c->ng) <= 0)
					c->dead = true;
			}
			if (!c->dead)
				conn_dispatch(srv, c);
		}
	}
	deliver_closed(srv);
	flush_all(srv);
	return 0;
}

/* ---- client ---------------------------------------------------------------- */

struct call {
	int fd;
	int32_t stream;
	struct buf framed_req;
	size_t req_off;
	struct buf raw;              /* the answer's DATA, framed */
	int http_status;
	int grpc_status;             /* -1 until a trailer or trailers-only header says */
	char grpc_message[256];
	bool closed;
	uint32_t reset_code;
	bool overflow;
};

static ssize_t ccb_send(nghttp2_session *ng, const uint8_t *data, size_t length, int flags, void *user)
{
	(void)ng;
	(void)flags;
	return fd_send(((struct call *)user)->fd, data, length);
}

static int ccb_header(nghttp2_session *ng, const nghttp2_frame *frame, const uint8_t *name, size_t namelen,
		      const uint8_t *value, size_t valuelen, uint8_t flags, void *user)
{
	(void)ng;
	(void)flags;
	struct call *k = user;
	if (frame->hd.stream_id != k->stream)
		return 0;
	char v[16];
	size_t vn = valuelen < sizeof(v) - 1 ? valuelen : sizeof(v) - 1;
	memcpy(v, value, vn);
	v[vn] = '\0';
	if (namelen == 7 && !memcmp(name, ":status", 7)) {
		if (!strnum_int(v, 100, 599, &k->http_status))
			k->http_status = 0;
	} else if (namelen == 11 && !memcmp(name, "grpc-status", 11)) {
		if (!strnum_int(v, 0, 1000, &k->grpc_status))
			k->grpc_status = H2RPC_INTERNAL;   /* an unreadable status is a failure */
	}
	else if (namelen == 12 && !memcmp(name, "grpc-message", 12))
		h2rpc_pct_decode((const char *)value, valuelen, k->grpc_message, sizeof(k->grpc_message));
	return 0;
}

static int ccb_data(nghttp2_session *ng, uint8_t flags, int32_t stream_id, const uint8_t *data, size_t len,
		    void *user)
{
	(void)ng;
	(void)flags;
	struct call *k = user;
	if (stream_id == k->stream && !k->overflow && buf_add(&k->raw, data, len))
		k->overflow = true;
	return 0;
}

static int ccb_close(nghttp2_session *ng, int32_t stream_id, uint32_t error_code, void *user)
{
	(void)ng;
	struct call *k = user;
	if (stream_id == k->stream) {
		k->closed = true;
		k->reset_code = error_code;
	}
	return 0;
}

static ssize_t read_req(nghttp2_session *ng, int32_t stream_id, uint8_t *dst, size_t length,
			uint32_t *data_flags, nghttp2_data_source *source, void *user)
{
	(void)ng;
	(void)stream_id;
	(void)user;
	struct call *k = source->ptr;
	size_t left = k->framed_req.len - k->req_off;
	size_t n = left < length ? left : length;
	memcpy(dst, k->framed_req.data + k->req_off, n);
	k->req_off += n;
	if (k->req_off == k->framed_req.len)
		*data_flags |= NGHTTP2_DATA_FLAG_EOF;
	return (ssize_t)n;
}

/* Runs the session until the call's stream closes; 0, or -1 with err. */
static int call_run(nghttp2_session *ng, struct call *k, int timeout_ms, char *err, size_t errlen)
{
	int64_t deadline = clock_mono_ms() + timeout_ms;
	while (!k->closed) {
		if (nghttp2_session_send(ng)) {
			snprintf(err, errlen, "write failed: %s", strerror(errno));
			return -1;
		}
		if (k->closed)
			break;
		int64_t left = deadline - clock_mono_ms();
		if (left <= 0) {
			snprintf(err, errlen, "no answer within %d ms", timeout_ms);
			return -1;
		}
		struct pollfd pfd = { .fd = k->fd, .events = POLLIN };
		if (nghttp2_session_want_write(ng))
			pfd.events |= POLLOUT;
		int pr = poll(&pfd, 1, (int)left);
		if (pr < 0 && errno != EINTR) {
			snprintf(err, errlen, "poll: %s", strerror(errno));
			return -1;
		}
		if (pr > 0 && (pfd.revents & (POLLIN | POLLHUP | POLLERR)) && fd_recv_into(k->fd, ng) <= 0 &&
		    !k->closed) {
			snprintf(err, errlen, "the server closed the connection");
			return -1;
		}
	}
	return 0;
}

/* k->fd: a non-blocking connection to the server's socket sa (socket_path); 0, or -1 with err. */
static int call_connect(struct call *k, const struct sockaddr_un *sa, const char *socket_path, char *err,
			size_t errlen)
{
	k->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (k->fd < 0 || connect(k->fd, (const struct sockaddr *)sa, sizeof(*sa))) {
		snprintf(err, errlen, "%s: %s", socket_path, strerror(errno));
		return -1;
	}
	if (fcntl(k->fd, F_SETFL, fcntl(k->fd, F_GETFL) | O_NONBLOCK)) {
		snprintf(err, errlen, "fcntl: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/* The closed stream's answer: its message into resp and 0, the grpc-status, or -1 (err says why). */
static int call_answer(const struct call *k, struct buf *resp, char *err, size_t errlen)
{
	const uint8_t *msg;
	size_t mlen;
	if (k->reset_code) {
		snprintf(err, errlen, "the server reset the stream (HTTP/2 error %u)", k->reset_code);
	} else if (k->http_status != 200) {
		snprintf(err, errlen, "HTTP status %d", k->http_status);
	} else if (k->grpc_status < 0) {
		snprintf(err, errlen, "the answer has no grpc-status");
	} else if (k->grpc_status > 0) {
		snprintf(err, errlen, "%s", k->grpc_message[0] ? k->grpc_message : "(no message)");
		return k->grpc_status;
	} else if (k->overflow) {
		snprintf(err, errlen, "answer larger than %zu bytes", H2RPC_MAX_MESSAGE);
	} else if (!h2rpc_unframe((const uint8_t *)k->raw.data, k->raw.len, &msg, &mlen, err, errlen)) {
		buf_clear(resp);
		if (!buf_add(resp, msg, mlen))
			return 0;
		snprintf(err, errlen, "answer too large");
	}
	return -1;
}

int h2rpc_call(const char *socket_path, const char *path, const uint8_t *req, size_t len, struct buf *resp,
	       int timeout_ms, char *err, size_t errlen)
{
	struct call k = { .fd = -1, .grpc_status = -1 };
	buf_init(&k.framed_req, H2RPC_MAX_MESSAGE + 5);
	buf_init(&k.raw, H2RPC_MAX_MESSAGE + 5);
	nghttp2_session *ng = NULL;
	nghttp2_session_callbacks *cbs = NULL;
	int rc = -1;
	struct sockaddr_un sa;
	if (unix_addr(&sa, socket_path, err, errlen))
		goto out;
	if (h2rpc_frame(&k.framed_req, req, len)) {
		snprintf(err, errlen, "request too large");
		goto out;
	}
	if (call_connect(&k, &sa, socket_path, err, errlen))
		goto out;
	if (nghttp2_session_callbacks_new(&cbs)) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	nghttp2_session_callbacks_set_send_callback(cbs, ccb_send);
	nghttp2_session_callbacks_set_on_header_callback(cbs, ccb_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, ccb_data);
	nghttp2_session_callbacks_set_on_stream_close_callback(cbs, ccb_close);
	if (nghttp2_session_client_new(&ng, cbs, &k) || nghttp2_submit_settings(ng, NGHTTP2_FLAG_NONE, NULL, 0)) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	nghttp2_nv hdrs[] = {
		{ (uint8_t *)":method", (uint8_t *)"POST", 7, 4, NGHTTP2_NV_FLAG_NONE },
		{ (uint8_t *)":scheme", (uint8_t *)"http", 7, 4, NGHTTP2_NV_FLAG_NONE },
		{ (uint8_t *)":path", (uint8_t *)path, 5, strlen(path), NGHTTP2_NV_FLAG_NONE },
		{ (uint8_t *)":authority", (uint8_t *)"localhost", 10, 9, NGHTTP2_NV_FLAG_NONE },
		{ (uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16, NGHTTP2_NV_FLAG_NONE },
		{ (uint8_t *)"te", (uint8_t *)"trailers", 2, 8, NGHTTP2_NV_FLAG_NONE },
	};
	nghttp2_data_provider prd = { .source.ptr = &k, .read_callback = read_req };
	k.stream = nghttp2_submit_request(ng, NULL, hdrs, sizeof(hdrs) / sizeof(hdrs[0]), &prd, &k);
	if (k.stream < 0) {
		snprintf(err, errlen, "cannot submit the request: %s", nghttp2_strerror(k.stream));
		goto out;
	}
	if (call_run(ng, &k, timeout_ms, err, errlen))
		goto out;
	rc = call_answer(&k, resp, err, errlen);
out:
	if (ng)
		nghttp2_session_del(ng);
	if (cbs)
		nghttp2_session_callbacks_del(cbs);
	if (k.fd >= 0)
		close(k.fd);
	buf_release(&k.framed_req);
	buf_release(&k.raw);
	return rc;
}
