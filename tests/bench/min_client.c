/* min_client.c - the least a client on gRPC core can spend per etcd call:
 * one thread, one completion queue, IN_FLIGHT async KV/Put calls kept in
 * flight (a new call as soon as one completes), each packed and unpacked
 * with protobuf-c. Prints calls/s and the process's CPU time per call, the
 * yardstick for the client CPU that `leaserun bench` reports per raw txn.
 *
 * usage: min_client HOST:PORT [CALLS] [IN_FLIGHT] [put|txn]
 *        (defaults 10000, 16, put; txn: the create-once txn of bench's raw
 *        phase, compare version == 0 then put)
 * Writes under /min-client-<pid>/ and deletes nothing (use a test etcd). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "rpc.pb-c.h"

struct call {
	grpc_call *call;
	grpc_byte_buffer *resp;
	grpc_metadata_array md_in, md_trail;
	grpc_status_code status;
	grpc_slice details;
};

static char prefix[64];
static long sent;
static int txn_mode;

/* The request of one call, packed into a new slice. */
static grpc_slice pack_request(const char *key, const char *val)
{
	Etcdserverpb__PutRequest put = ETCDSERVERPB__PUT_REQUEST__INIT;
	put.key = (ProtobufCBinaryData){ strlen(key), (uint8_t *)key };
	put.value = (ProtobufCBinaryData){ strlen(val), (uint8_t *)val };
	const ProtobufCMessage *m = &put.base;
	Etcdserverpb__Compare cmp = ETCDSERVERPB__COMPARE__INIT;
	Etcdserverpb__Compare *cmps[1] = { &cmp };
	Etcdserverpb__RequestOp op = ETCDSERVERPB__REQUEST_OP__INIT;
	Etcdserverpb__RequestOp *ops[1] = { &op };
	Etcdserverpb__TxnRequest txn = ETCDSERVERPB__TXN_REQUEST__INIT;
	if (txn_mode) {
		cmp.key = put.key;
		cmp.target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__VERSION;
		cmp.result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__EQUAL;
		cmp.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VERSION;
		cmp.version = 0;
		op.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
		op.request_put = &put;
		txn.compare = cmps;
		txn.n_compare = 1;
		txn.success = ops;
		txn.n_success = 1;
		m = &txn.base;
	}
	grpc_slice bytes = grpc_slice_malloc(protobuf_c_message_get_packed_size(m));
	protobuf_c_message_pack(m, GRPC_SLICE_START_PTR(bytes));
	return bytes;
}

static double now_s(const struct timespec *ts)
{
	return (double)ts->tv_sec + (double)ts->tv_nsec / 1e9;
}

static double cpu_s(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* Start call number `sent` in slot s; 0 on success. */
static int start(grpc_channel *ch, grpc_completion_queue *cq, struct call *s)
{
	char key[96], val[32];
	snprintf(key, sizeof(key), "%sk%ld", prefix, sent);
	snprintf(val, sizeof(val), "v%ld", sent);
	grpc_slice bytes = pack_request(key, val);
	grpc_byte_buffer *buf = grpc_raw_byte_buffer_create(&bytes, 1);
	grpc_slice_unref(bytes);
	gpr_timespec deadline = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
	                                     gpr_time_from_seconds(10, GPR_TIMESPAN));
	s->call = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
	                                   grpc_slice_from_static_string(
	                                       txn_mode ? "/etcdserverpb.KV/Txn"
	                                                : "/etcdserverpb.KV/Put"),
	                                   NULL, deadline, NULL);
	grpc_metadata_array_init(&s->md_in);
	grpc_metadata_array_init(&s->md_trail);
	s->resp = NULL;
	grpc_op ops[6];
	memset(ops, 0, sizeof(ops));
	ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
	ops[1].op = GRPC_OP_SEND_MESSAGE;
	ops[1].data.send_message.send_message = buf;
	ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
	ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
	ops[3].data.recv_initial_metadata.recv_initial_metadata = &s->md_in;
	ops[4].op = GRPC_OP_RECV_MESSAGE;
	ops[4].data.recv_message.recv_message = &s->resp;
	ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
	ops[5].data.recv_status_on_client.trailing_metadata = &s->md_trail;
	ops[5].data.recv_status_on_client.status = &s->status;
	ops[5].data.recv_status_on_client.status_details = &s->details;
	grpc_call_error e = grpc_call_start_batch(s->call, ops, 6, s, NULL);
	grpc_byte_buffer_destroy(buf);
	sent++;
	return e == GRPC_CALL_OK ? 0 : -1;
}

/* Slot s completed: check and free it; 0 when the Put succeeded. */
static int finish(struct call *s)
{
	int rc = s->status == GRPC_STATUS_OK && s->resp != NULL ? 0 : -1;
	if (rc == 0) {
		grpc_byte_buffer_reader rd;
		grpc_byte_buffer_reader_init(&rd, s->resp);
		grpc_slice all = grpc_byte_buffer_reader_readall(&rd);
		grpc_byte_buffer_reader_destroy(&rd);
		const ProtobufCMessageDescriptor *d = txn_mode
		                                          ? &etcdserverpb__txn_response__descriptor
		                                          : &etcdserverpb__put_response__descriptor;
		ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, GRPC_SLICE_LENGTH(all),
		                                                GRPC_SLICE_START_PTR(all));
		/* Both replies have the header first. */
		Etcdserverpb__ResponseHeader *h =
		    m == NULL ? NULL : txn_mode ? ((Etcdserverpb__TxnResponse *)m)->header
		                                : ((Etcdserverpb__PutResponse *)m)->header;
		rc = h != NULL && h->revision > 0 ? 0 : -1;
		if (m != NULL)
			protobuf_c_message_free_unpacked(m, NULL);
		grpc_slice_unref(all);
	} else {
		char *d = grpc_slice_to_c_string(s->details);
		fprintf(stderr, "min_client: Put failed: status %d: %s\n", (int)s->status, d);
		gpr_free(d);
	}
	grpc_byte_buffer_destroy(s->resp);
	grpc_slice_unref(s->details);
	grpc_metadata_array_destroy(&s->md_in);
	grpc_metadata_array_destroy(&s->md_trail);
	grpc_call_unref(s->call);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: min_client HOST:PORT [CALLS] [IN_FLIGHT] [put|txn]\n");
		return 2;
	}
	long calls = argc > 2 ? atol(argv[2]) : 10000;
	int in_flight = argc > 3 ? atoi(argv[3]) : 16;
	txn_mode = argc > 4 && strcmp(argv[4], "txn") == 0;
	if (calls < 1 || in_flight < 1 || in_flight > 1024) {
		fprintf(stderr, "min_client: CALLS and IN_FLIGHT must be positive\n");
		return 2;
	}
	snprintf(prefix, sizeof(prefix), "/min-client-%d/", (int)getpid());
	grpc_init();
	char target[300];
	snprintf(target, sizeof(target), "ipv4:%s", argv[1]);
	grpc_channel_credentials *cred = grpc_insecure_credentials_create();
	grpc_channel *ch = grpc_channel_create(target, cred, NULL);
	grpc_channel_credentials_release(cred);
	grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
	struct call *slots = calloc((size_t)in_flight, sizeof(*slots));
	int failed = 0;
	/* One warm-up call: the connection is made before the clock starts. */
	if (start(ch, cq, &slots[0]) != 0)
		failed = 1;
	grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
	if (!failed && (ev.type != GRPC_OP_COMPLETE || finish(&slots[0]) != 0))
		failed = 1;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	double cpu0 = cpu_s();
	sent = 0;
	long done = 0, outstanding = 0;
	for (int i = 0; !failed && i < in_flight && sent < calls; i++) {
		failed = start(ch, cq, &slots[i]) != 0;
		outstanding++;
	}
	while (!failed && outstanding > 0) {
		ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
		if (ev.type != GRPC_OP_COMPLETE || !ev.success) {
			failed = 1;
			break;
		}
		struct call *s = ev.tag;
		outstanding--;
		done++;
		if (finish(s) != 0)
			failed = 1;
		else if (sent < calls) {
			failed = start(ch, cq, s) != 0;
			outstanding++;
		}
	}
	double cpu = cpu_s() - cpu0;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double secs = now_s(&t1) - now_s(&t0);
	if (!failed)
		printf("{\"call\":\"%s\",\"calls\":%ld,\"in_flight\":%d,\"calls_per_s\":%.1f,"
		       "\"cpu_us_per_call\":%.1f}\n",
		       txn_mode ? "txn" : "put", done, in_flight, (double)done / secs, cpu * 1e6 / (double)done);
	grpc_channel_destroy(ch);
	grpc_completion_queue_shutdown(cq);
	while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
	       GRPC_QUEUE_SHUTDOWN)
		;
	grpc_completion_queue_destroy(cq);
	free(slots);
	grpc_shutdown();
	return failed ? 1 : 0;
}
