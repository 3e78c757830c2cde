// LD_AUDIT shim: the process (and each thread it starts) sees a CPU whose newest vector
// extension is AVX2 (no AVX-512, AMX or AVX-VNNI, as the AVX2-only EPYCs of Zen 2/3), so
// runtimes that pick kernels from CPUID (ONNX Runtime's MLAS, oneDNN, V8) take their AVX2
// paths on an AVX-512 machine. Used by as_avx2_cpu.sh to compare Kiln's AVX2 path with a
// peer's AVX2 path in one run, where no AVX2-only machine is at hand.
//
// How: arch_prctl(ARCH_SET_CPUID, 0) makes the CPUID instruction fault (the kernel's
// "cpuid_fault" feature, Intel and recent AMD, also inside KVM/Firecracker guests). The
// SIGSEGV handler runs the real CPUID with faulting briefly off, clears the AVX-512, AMX and
// AVX-VNNI feature bits of leaf 7, and steps over the instruction. Faulting is per thread and
// inherited by new threads; exec resets it, so the cap is set again in each program. It is
// an audit library (LD_AUDIT), not LD_PRELOAD, because the dynamic loader calls la_version
// before any other library's constructor: oneDNN and libgcc read CPUID in theirs. The audit
// interface also lets it bind the program's sigaction and signal to its own: a program
// that sets a SIGSEGV handler (Node does, for WebAssembly) gets it called for every fault
// that is not CPUID, instead of replacing the handler that emulates CPUID.
// The hardware still executes AVX-512: this caps what software chooses, not what it can run.
// glibc chooses its string functions before that; as_avx2_cpu.sh caps those with
// GLIBC_TUNABLES.
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <cpuid.h>
#include <link.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

// Leaf 7 sub-leaf 0: EBX avx512f(16) dq(17) ifma(21) pf(26) er(27) cd(28) bw(30) vl(31);
// ECX vbmi(1) vbmi2(6) vnni(11) bitalg(12) vpopcntdq(14); EDX 4vnniw(2) 4fmaps(3)
// vp2intersect(8) amx_bf16(22) avx512_fp16(23) amx_tile(24) amx_int8(25).
#define LEAF7_EBX_AVX512                                                                      \
  ((1u << 16) | (1u << 17) | (1u << 21) | (1u << 26) | (1u << 27) | (1u << 28) | (1u << 30) | \
   (1u << 31))
#define LEAF7_ECX_AVX512 ((1u << 1) | (1u << 6) | (1u << 11) | (1u << 12) | (1u << 14))
#define LEAF7_EDX_AVX512 \
  ((1u << 2) | (1u << 3) | (1u << 8) | (1u << 22) | (1u << 23) | (1u << 24) | (1u << 25))
// Leaf 7 sub-leaf 1: EAX avx_vnni(4) avx512_bf16(5) avx_ifma(23); EDX avx_vnni_int8(4)
// avx_ne_convert(5).
#define LEAF7_1_EAX_HIDDEN ((1u << 4) | (1u << 5) | (1u << 23))
#define LEAF7_1_EDX_HIDDEN ((1u << 4) | (1u << 5))

// What the program asked for SIGSEGV (through the sigaction and signal below): called for
// faults that are not CPUID.
static struct sigaction program_segv;

static void on_segv(int sig, siginfo_t* info, void* context) {
  ucontext_t* uc = (ucontext_t*)context;
  greg_t* regs = uc->uc_mcontext.gregs;
  const uint8_t* ip = (const uint8_t*)regs[REG_RIP];
  // A faulting CPUID is a general-protection fault (SI_KERNEL), whose instruction was
  // fetched, so its bytes are readable; a jump to an unmapped address is SEGV_MAPERR.
  if (info->si_code == SI_KERNEL && ip[0] == 0x0f && ip[1] == 0xa2) {
    unsigned a, b, c, d;
    const unsigned leaf = (unsigned)regs[REG_RAX], sub = (unsigned)regs[REG_RCX];
    syscall(SYS_arch_prctl, ARCH_SET_CPUID, 1);
    __cpuid_count(leaf, sub, a, b, c, d);
    syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0);
    if (leaf == 7 && sub == 0) {
      b &= ~LEAF7_EBX_AVX512;
      c &= ~LEAF7_ECX_AVX512;
      d &= ~LEAF7_EDX_AVX512;
    } else if (leaf == 7 && sub == 1) {
      a &= ~LEAF7_1_EAX_HIDDEN;
      d &= ~LEAF7_1_EDX_HIDDEN;
    }
    regs[REG_RAX] = a;
    regs[REG_RBX] = b;
    regs[REG_RCX] = c;
    regs[REG_RDX] = d;
    regs[REG_RIP] += 2;
    return;
  }
  // Not CPUID: what the program's own handler, or the default, does.
  if (program_segv.sa_flags & SA_SIGINFO) {
    program_segv.sa_sigaction(sig, info, context);
  } else if (program_segv.sa_handler != SIG_DFL && program_segv.sa_handler != SIG_IGN) {
    program_segv.sa_handler(sig);
  } else {
    signal(SIGSEGV, SIG_DFL);  // returning re-runs the faulting instruction, which now kills
  }
}

// The program's sigaction: SIGSEGV's action is recorded, not installed.
static int program_sigaction(int sig, const struct sigaction* act, struct sigaction* old) {
  if (sig != SIGSEGV) return sigaction(sig, act, old);
  if (old != NULL) *old = program_segv;
  if (act != NULL) program_segv = *act;
  return 0;
}

static sighandler_t program_signal(int sig, sighandler_t handler) {
  if (sig != SIGSEGV) return signal(sig, handler);
  const sighandler_t old = (program_segv.sa_flags & SA_SIGINFO) ? SIG_DFL : program_segv.sa_handler;
  memset(&program_segv, 0, sizeof(program_segv));
  program_segv.sa_handler = handler;
  program_segv.sa_flags = SA_RESTART;
  return old;
}

static void cap_cpuid_to_avx2(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;  // a thread's alternate stack, if it set one
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGSEGV, &sa, &program_segv) != 0 ||
      syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0) != 0) {
    // Without CPUID faulting the cap cannot hold: stop rather than measure the wrong path.
    fputs(
        "cpuid_avx2: this kernel or CPU has no CPUID faulting (cpuid_fault in "
        "/proc/cpuinfo); cannot hide AVX-512\n",
        stderr);
    _exit(3);
  }
}

// The audit interface's first call, made as the loader opens this library. Returning the
// version keeps the library (and so the signal handler) loaded.
unsigned la_version(unsigned version) {
  cap_cpuid_to_avx2();
  return version;
}

// Every library may bind symbols to and from others, so la_symbind64 sees each binding.
unsigned la_objopen(struct link_map* map, Lmid_t lmid, uintptr_t* cookie) {
  (void)map, (void)lmid, (void)cookie;
  return LA_FLG_BINDTO | LA_FLG_BINDFROM;
}

// The program's sigaction and signal become program_sigaction and program_signal.
uintptr_t la_symbind64(Elf64_Sym* sym, unsigned index, uintptr_t* ref_cookie, uintptr_t* def_cookie,
                       unsigned* flags, const char* name) {
  (void)index, (void)ref_cookie, (void)def_cookie, (void)flags;
  if (strcmp(name, "sigaction") == 0 || strcmp(name, "__sigaction") == 0) {
    return (uintptr_t)&program_sigaction;
  }
  if (strcmp(name, "signal") == 0 || strcmp(name, "bsd_signal") == 0 ||
      strcmp(name, "sysv_signal") == 0) {
    return (uintptr_t)&program_signal;
  }
  return sym->st_value;
}
