/* Control leaving a leaf straight into an ancestor 2-6 frames up, by hand (issue 25):
 * `__builtin_longjmp` (GCC's own setjmp/longjmp: an indirect `jmp` from the function that
 * calls it, no libc), and a context switch back into a saved frame by a `ret` (as
 * coroutine libraries and hand-written unwinders do). Neither goes through a function
 * named like an unwinder: the trace shows ordinary code jumping or returning into the
 * middle of a function that is already on the stack. */
#include <stdio.h>

static volatile long sink;
static void *jump_buffer[5];

/* resume_ctx(ctx) goes back into the frame that called save_ctx(ctx), as if save_ctx
 * returned a second time (with 1): callee-saved registers, stack pointer, then `ret` to
 * save_ctx's return address. */
struct ctx {
  long rbx, rbp, r12, r13, r14, r15, rsp, rip;
};
int save_ctx(struct ctx *c);
void resume_ctx(struct ctx *c) __attribute__((noreturn));
asm(".text\n"
    ".globl save_ctx\n.type save_ctx, @function\nsave_ctx:\n"
    "  mov %rbx, 0(%rdi)\n  mov %rbp, 8(%rdi)\n  mov %r12, 16(%rdi)\n"
    "  mov %r13, 24(%rdi)\n  mov %r14, 32(%rdi)\n  mov %r15, 40(%rdi)\n"
    "  lea 8(%rsp), %rax\n  mov %rax, 48(%rdi)\n  mov (%rsp), %rax\n  mov %rax, 56(%rdi)\n"
    "  xor %eax, %eax\n  ret\n.size save_ctx, .-save_ctx\n"
    ".globl resume_ctx\n.type resume_ctx, @function\nresume_ctx:\n"
    "  mov 0(%rdi), %rbx\n  mov 8(%rdi), %rbp\n  mov 16(%rdi), %r12\n"
    "  mov 24(%rdi), %r13\n  mov 32(%rdi), %r14\n  mov 40(%rdi), %r15\n"
    "  mov 48(%rdi), %rsp\n  push 56(%rdi)\n  mov $1, %eax\n  ret\n"
    ".size resume_ctx, .-resume_ctx\n");
static struct ctx saved;

__attribute__((noinline)) void leaf_jump(int n) {
  sink += n;
  if (n % 2 == 0) __builtin_longjmp(jump_buffer, 1);
}
__attribute__((noinline)) void leaf_return(int n) {
  sink += n;
  if (n % 2 == 0) resume_ctx(&saved);
}
__attribute__((noinline)) void middle(int n, int by_return) {
  if (by_return)
    leaf_return(n);
  else
    leaf_jump(n);
  sink++;
}
__attribute__((noinline)) void upper(int n, int by_return) {
  middle(n, by_return);
  sink++;
}
/* A recursion between the catcher and the leaf: the jump lands in `catcher`, whatever the
 * depth of `descend` (its frames are all left). */
__attribute__((noinline)) void descend(int depth, int n, int by_return) {
  if (depth == 0)
    upper(n, by_return);
  else
    descend(depth - 1, n, by_return);
  sink++;
}

__attribute__((noinline)) int catch_jump(int n) {
  if (__builtin_setjmp(jump_buffer)) return -1;
  descend(n % 4, n, 0);
  return 0;
}
__attribute__((noinline)) int catch_return(int n) {
  if (save_ctx(&saved)) return -1;
  descend(n % 4, n, 1);
  return 0;
}

int main(void) {
  long caught = 0;
  for (int i = 0; i < 600; i++) caught += catch_jump(i) + catch_return(i);
  printf("%ld %ld\n", caught, (long)sink);
  return 0;
}
