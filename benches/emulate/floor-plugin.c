/* The floors of a qemu-user TCG plugin, for scripts/bench-emulate (built by the script
 * with `cc -O2 -shared -fPIC`; Debian's qemu-user ships no sample plugins and no
 * qemu-plugin.h, so the few API v1 declarations used are written out below).
 *
 *   qemu-x86_64 -plugin ./floor-plugin.so PROG ...            do nothing: the plugin is
 *        loaded and installed, nothing is registered (the cost of loading a plugin at all)
" *   qemu-x86_64 -plugin ./floor-plugin.so,mode=trans PROG     a translation callback
 *        that instruments nothing (QEMU's own cost of letting a plugin see translations)
 *   qemu-x86_64 -plugin ./floor-plugin.so,mode=inline PROG    every block adds its
 *        instruction count to a counter by an inline op (the floor of keeping time inline)
 *   qemu-x86_64 -plugin ./floor-plugin.so,mode=cb PROG        every block calls an empty
 *        callback (the floor of a callback per executed block: every-block logging)
 *
 * Written for this benchmark; it shares no code with ptscope's plugin.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef uint64_t plugin_id;
struct qemu_info_t;
struct qemu_plugin_tb;

/* From qemu-plugin.h (QEMU 7.2, API v1). */
enum { CB_NO_REGS = 0 };
enum { INLINE_ADD_U64 = 0 };
typedef void (*tb_trans_cb)(plugin_id, struct qemu_plugin_tb *);
typedef void (*vcpu_udata_cb)(unsigned int, void *);
void qemu_plugin_register_vcpu_tb_trans_cb(plugin_id, tb_trans_cb);
void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *, vcpu_udata_cb, int, void *);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *, int, void *, uint64_t);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *);

__attribute__((visibility("default"))) int qemu_plugin_version = 1;

static uint64_t icount;

static void on_exec(unsigned int vcpu, void *udata) {
    (void)vcpu;
    (void)udata;
}

static void on_translate_nothing(plugin_id id, struct qemu_plugin_tb *tb) {
    (void)id;
    (void)tb;
}

static void on_translate_inline(plugin_id id, struct qemu_plugin_tb *tb) {
    (void)id;
    qemu_plugin_register_vcpu_tb_exec_inline(tb, INLINE_ADD_U64, &icount,
                                             qemu_plugin_tb_n_insns(tb));
}

static void on_translate_cb(plugin_id id, struct qemu_plugin_tb *tb) {
    (void)id;
    qemu_plugin_register_vcpu_tb_exec_cb(tb, on_exec, CB_NO_REGS, NULL);
}

__attribute__((visibility("default"))) int
qemu_plugin_install(plugin_id id, const struct qemu_info_t *info, int argc, char **argv) {
    (void)info;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "mode=trans") == 0)
            qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate_nothing);
        else if (strcmp(argv[i], "mode=inline") == 0)
            qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate_inline);
        else if (strcmp(argv[i], "mode=cb") == 0)
            qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate_cb);
        else
            return -1;
    }
    return 0;
}
