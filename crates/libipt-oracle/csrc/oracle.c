/* ptscope's own shim over libipt's instruction-flow and block decoders (test only).
 * It reports what the decoder finds through one callback, and counts. */
#include <intel-pt.h>
#include <stdint.h>
#include <string.h>

typedef size_t (*oracle_read)(uint8_t *buf, size_t size, uint64_t ip, void *ctx);
typedef void (*oracle_emit)(void *ctx, int kind, uint64_t a, uint64_t b, uint64_t c);

enum {
	OR_INSN = 0,     /* a: ip */
	OR_BLOCK = 1,    /* a: first ip, b: last ip, c: instructions */
	OR_ERROR = 2,    /* a: -error code, b: trace offset */
	OR_ENABLED = 3,  /* a: ip */
	OR_DISABLED = 4, /* a: ip (0: suppressed) */
	OR_OVERFLOW = 5, /* a: ip where tracing resumed (0: unknown) */
	OR_PTWRITE = 6,  /* a: payload, b: ip */
	OR_TSX = 7,      /* a: ip, b: speculative, c: aborted */
	OR_ASYNC = 8,    /* a: from, b: to */
	OR_EVENT = 9,    /* a: libipt's event type */
};

struct reader {
	oracle_read read;
	void *ctx;
};

static int read_memory(uint8_t *buffer, size_t size, const struct pt_asid *asid,
		       uint64_t ip, void *context)
{
	struct reader *r = context;
	size_t n;

	(void)asid;
	n = r->read(buffer, size, ip, r->ctx);
	if (!n)
		return -pte_nomap;
	return (int)n;
}

static void event(const struct pt_event *ev, oracle_emit emit, void *ctx)
{
	if (!emit)
		return;
	switch (ev->type) {
	case ptev_enabled:
		emit(ctx, OR_ENABLED, ev->variant.enabled.ip, 0, 0);
		break;
	case ptev_disabled:
		emit(ctx, OR_DISABLED, ev->ip_suppressed ? 0 : ev->variant.disabled.ip, 0, 0);
		break;
	case ptev_async_disabled:
		emit(ctx, OR_DISABLED, ev->variant.async_disabled.at, 0, 0);
		break;
	case ptev_async_branch:
		emit(ctx, OR_ASYNC, ev->variant.async_branch.from,
		     ev->ip_suppressed ? 0 : ev->variant.async_branch.to, 0);
		break;
	case ptev_overflow:
		emit(ctx, OR_OVERFLOW, ev->ip_suppressed ? 0 : ev->variant.overflow.ip, 0, 0);
		break;
	case ptev_ptwrite:
		emit(ctx, OR_PTWRITE, ev->variant.ptwrite.payload,
		     ev->ip_suppressed ? 0 : ev->variant.ptwrite.ip, 0);
		break;
	case ptev_tsx:
		emit(ctx, OR_TSX, ev->ip_suppressed ? 0 : ev->variant.tsx.ip,
		     ev->variant.tsx.speculative, ev->variant.tsx.aborted);
		break;
	default:
		emit(ctx, OR_EVENT, ev->type, 0, 0);
		break;
	}
}

/* Decodes trace[0, len) from its first PSB to its end, resynchronising at the next PSB
 * after an error (as ptxed --resync-on-error). counts: instructions, blocks, errors.
 * Returns 0, or a negative libipt error code if the decoder cannot be set up. */
int ptscope_oracle_run(const uint8_t *trace, size_t len, int blocks, oracle_read read,
		       void *read_ctx, oracle_emit emit, void *emit_ctx, uint64_t counts[3])
{
	struct pt_config config;
	struct pt_insn_decoder *idec = NULL;
	struct pt_block_decoder *bdec = NULL;
	struct pt_image *image;
	struct reader reader = { read, read_ctx };
	uint64_t last_offset = UINT64_MAX;
	int status;

	memset(&config, 0, sizeof(config));
	config.size = sizeof(config);
	config.begin = (uint8_t *)trace;
	config.end = (uint8_t *)trace + len;
	counts[0] = counts[1] = counts[2] = 0;

	if (blocks) {
		bdec = pt_blk_alloc_decoder(&config);
		if (!bdec)
			return -pte_nomem;
		image = pt_blk_get_image(bdec);
	} else {
		idec = pt_insn_alloc_decoder(&config);
		if (!idec)
			return -pte_nomem;
		image = pt_insn_get_image(idec);
	}
	status = pt_image_set_callback(image, read_memory, &reader);
	if (status < 0)
		goto out;

	for (;;) {
		uint64_t offset = 0;

		status = blocks ? pt_blk_sync_forward(bdec) : pt_insn_sync_forward(idec);
		if (status < 0)
			break;
		for (;;) {
			while (status & pts_event_pending) {
				struct pt_event ev;

				status = blocks ? pt_blk_event(bdec, &ev, sizeof(ev))
						: pt_insn_event(idec, &ev, sizeof(ev));
				if (status < 0)
					break;
				event(&ev, emit, emit_ctx);
			}
			if (status < 0)
				break;
			if (blocks) {
				struct pt_block b;

				status = pt_blk_next(bdec, &b, sizeof(b));
				if (b.ninsn) {
					counts[0] += b.ninsn;
					counts[1] += 1;
					if (emit)
						emit(emit_ctx, OR_BLOCK, b.ip, b.end_ip, b.ninsn);
				}
			} else {
				struct pt_insn insn;

				status = pt_insn_next(idec, &insn, sizeof(insn));
				if (status >= 0) {
					counts[0] += 1;
					if (emit)
						emit(emit_ctx, OR_INSN, insn.ip, 0, 0);
				}
			}
			if (status < 0)
				break;
		}
		if (status == -pte_eos)
			break;
		if (blocks)
			pt_blk_get_offset(bdec, &offset);
		else
			pt_insn_get_offset(idec, &offset);
		counts[2] += 1;
		if (emit)
			emit(emit_ctx, OR_ERROR, (uint64_t)-status, offset, 0);
		if (offset == last_offset)
			break;
		last_offset = offset;
	}
	status = (status == -pte_eos) ? 0 : status;
out:
	if (bdec)
		pt_blk_free_decoder(bdec);
	if (idec)
		pt_insn_free_decoder(idec);
	return status < 0 ? status : 0;
}
