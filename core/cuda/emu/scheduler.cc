// The CUDA emulator's kernel scheduler: one fiber per CUDA thread of a block, run round-robin
// until each reaches a barrier or returns; see emu.h. Fibers switch with a few instructions
// (callee-saved registers and the FP control words; no signal mask, unlike swapcontext, whose
// system call per switch made kernels with many barriers slow).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/cuda/emu/emu.h"
#include "core/cuda/emu/internal.h"

#if !defined(__x86_64__)
#error "The CUDA emulator's fiber switch is written for x86-64."
#endif
#if defined(__CET__) && (__CET__ & 2)
#error "The fiber switch returns onto another stack, which a CET shadow stack forbids."
#endif
#if defined(__SANITIZE_ADDRESS__)
#error \
    "The CUDA emulator's fibers are not annotated for AddressSanitizer (use --config=asan alone)."
#endif

// void MtEmuSwitch(void** save_sp, void* load_sp): saves the callee-saved registers, MXCSR and
// the x87 control word on the current stack, stores the stack pointer in *save_sp, then restores
// the same from the stack at load_sp and returns there.
extern "C" void MtEmuSwitch(void** save_sp, void* load_sp);
__asm__(
    ".pushsection .text\n"
    ".globl MtEmuSwitch\n"
    ".hidden MtEmuSwitch\n"
    ".type MtEmuSwitch, @function\n"
    "MtEmuSwitch:\n"
    "  pushq %rbp\n"
    "  pushq %rbx\n"
    "  pushq %r12\n"
    "  pushq %r13\n"
    "  pushq %r14\n"
    "  pushq %r15\n"
    "  subq $8, %rsp\n"
    "  stmxcsr (%rsp)\n"
    "  fnstcw 4(%rsp)\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  ldmxcsr (%rsp)\n"
    "  fldcw 4(%rsp)\n"
    "  addq $8, %rsp\n"
    "  popq %r15\n"
    "  popq %r14\n"
    "  popq %r13\n"
    "  popq %r12\n"
    "  popq %rbx\n"
    "  popq %rbp\n"
    "  ret\n"
    ".size MtEmuSwitch, .-MtEmuSwitch\n"
    ".popsection\n");

namespace mt {
namespace cuda_emu {
namespace {

constexpr size_t kStackBytes = 256 * 1024;
constexpr int kWarp = 32;

enum class Wait { kRunnable, kBlockBarrier, kWarpBarrier, kDone };

struct Fiber {
  void* sp = nullptr;  // saved stack pointer while suspended
  ThreadState state;
  Wait wait = Wait::kRunnable;
  unsigned mask = 0;  // of the warp barrier it waits at
  uint64_t slot = 0;  // its deposit for a warp exchange
};

size_t PageSize() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

// Fiber stacks, each with an inaccessible page below it, kept per OS thread between launches.
struct Stacks {
  char* base = nullptr;
  size_t bytes = 0;
  int count = 0;

  ~Stacks() {
    if (base != nullptr) munmap(base, bytes);
  }
  char* Stack(int i) const { return base + i * (kStackBytes + PageSize()) + PageSize(); }
  void Reserve(int n) {
    if (n <= count) return;
    if (base != nullptr) munmap(base, bytes);
    bytes = static_cast<size_t>(n) * (kStackBytes + PageSize());
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) Fail("cannot map %d fiber stacks", n);
    base = static_cast<char*>(p);
    count = n;
    for (int i = 0; i < n; ++i) {
      if (mprotect(Stack(i) - PageSize(), PageSize(), PROT_NONE) != 0) {
        Fail("cannot protect a fiber stack's guard page");
      }
    }
  }
};

// A block's dynamic shared memory, ending at an inaccessible page.
struct SharedBuffer {
  char* map = nullptr;
  size_t map_bytes = 0;
  char* data = nullptr;

  ~SharedBuffer() { Release(); }
  void Release() {
    if (map != nullptr) munmap(map, map_bytes);
    map = data = nullptr;
  }
  void Allocate(size_t bytes) {
    Release();
    const size_t page = PageSize();
    const size_t padded = (bytes + 15) / 16 * 16;
    map_bytes = (padded + page - 1) / page * page + page;
    void* p = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) Fail("cannot map %zu bytes of shared memory", bytes);
    map = static_cast<char*>(p);
    char* guard = map + map_bytes - page;
    if (mprotect(guard, page, PROT_NONE) != 0) Fail("cannot protect shared memory's guard page");
    data = guard - padded;
  }
};

struct Scheduler {
  Stacks stacks;
  SharedBuffer shared;
  size_t shared_bytes = 0;
  std::vector<Fiber> fibers;
  void* main_sp = nullptr;
  Fiber* current = nullptr;
  const std::function<void()>* body = nullptr;
  const char* name = "";
  bool running = false;
  uint64_t launches = 0;
};

thread_local Scheduler scheduler;

// A fiber's first function; it never returns (its stack has no caller).
[[noreturn]] void FiberMain() {
  Scheduler& s = scheduler;
  (*s.body)();
  s.current->wait = Wait::kDone;
  void* unused = nullptr;
  MtEmuSwitch(&unused, s.main_sp);
  __builtin_unreachable();
}

// A stack that MtEmuSwitch resumes into FiberMain: a dummy return address for FiberMain (so that
// it starts with the stack alignment of a called function), FiberMain's address to return to,
// six zeroed registers, and the current MXCSR and x87 control word.
void* InitialStack(char* stack_top) {
  auto top = reinterpret_cast<uintptr_t>(stack_top) & ~uintptr_t{15};
  auto* words = reinterpret_cast<uint64_t*>(top);
  *--words = 0;                                       // FiberMain's "return address"
  *--words = reinterpret_cast<uint64_t>(&FiberMain);  // where MtEmuSwitch returns
  for (int i = 0; i < 6; ++i) *--words = 0;           // rbp rbx r12 r13 r14 r15
  uint32_t mxcsr = 0;
  uint16_t fpucw = 0;
  __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
  __asm__ volatile("fnstcw %0" : "=m"(fpucw));
  *--words = static_cast<uint64_t>(mxcsr) | static_cast<uint64_t>(fpucw) << 32;
  return words;
}

// Suspends the running fiber (its wait state already set) and resumes the scheduler.
void Yield() {
  Scheduler& s = scheduler;
  Fiber* f = s.current;
  MtEmuSwitch(&f->sp, s.main_sp);
}

std::string Describe(const Fiber& f) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "thread (%u,%u,%u)", f.state.thread_idx.x, f.state.thread_idx.y,
                f.state.thread_idx.z);
  return buf;
}

const char* WaitName(Wait w) {
  switch (w) {
    case Wait::kRunnable:
      return "running";
    case Wait::kBlockBarrier:
      return "at __syncthreads";
    case Wait::kWarpBarrier:
      return "at a warp barrier (__syncwarp or a shuffle)";
    case Wait::kDone:
      return "exited";
  }
  return "?";
}

[[noreturn]] void Deadlock(const char* why, const Fiber& waiter, const Fiber* other) {
  const Scheduler& s = scheduler;
  const ThreadState& t = waiter.state;
  Fail("kernel %s, block (%u,%u,%u): %s: %s waits %s%s%s%s", s.name, t.block_idx.x, t.block_idx.y,
       t.block_idx.z, why, Describe(waiter).c_str(), WaitName(waiter.wait),
       other != nullptr ? " but " : "", other != nullptr ? Describe(*other).c_str() : "",
       other != nullptr ? (std::string(" is ") + WaitName(other->wait)).c_str() : "");
}

// Releases the warp barriers whose lanes have all arrived; true if any was. As on sm_70 and later,
// lanes of the mask that have exited (or lie past the end of a partial last warp) do not hold the
// others back; what a shuffle reads from them is undefined (WarpExchange poisons it).
bool ReleaseWarpBarriers(std::vector<Fiber>& fibers) {
  bool released = false;
  const int n = static_cast<int>(fibers.size());
  for (int i = 0; i < n; ++i) {
    Fiber& f = fibers[i];
    if (f.wait != Wait::kWarpBarrier) continue;
    const int warp_base = i / kWarp * kWarp;
    bool ready = true;
    for (int lane = 0; lane < kWarp && ready; ++lane) {
      if ((f.mask >> lane & 1u) == 0) continue;
      const int j = warp_base + lane;
      if (j >= n || fibers[j].wait == Wait::kDone) continue;
      if (fibers[j].wait != Wait::kWarpBarrier || fibers[j].mask != f.mask) ready = false;
    }
    if (!ready) continue;
    for (int lane = 0; lane < kWarp; ++lane) {
      const int j = warp_base + lane;
      if ((f.mask >> lane & 1u) != 0 && j < n && fibers[j].wait == Wait::kWarpBarrier) {
        fibers[j].wait = Wait::kRunnable;
      }
    }
    released = true;
  }
  return released;
}

// Explains why no barrier can be released.
[[noreturn]] void ReportDeadlock(const std::vector<Fiber>& fibers) {
  const int n = static_cast<int>(fibers.size());
  for (int i = 0; i < n; ++i) {
    const Fiber& f = fibers[i];
    if (f.wait != Wait::kWarpBarrier) continue;
    const int warp_base = i / kWarp * kWarp;
    for (int lane = 0; lane < kWarp; ++lane) {
      if ((f.mask >> lane & 1u) == 0) continue;
      const int j = warp_base + lane;
      if (j >= n || fibers[j].wait == Wait::kDone) continue;
      if (fibers[j].wait != Wait::kWarpBarrier) {
        Deadlock("a lane of the warp barrier's mask never arrives", f, &fibers[j]);
      }
      if (fibers[j].mask != f.mask) {
        Deadlock("lanes of one warp wait at warp barriers with different masks", f, &fibers[j]);
      }
    }
  }
  for (const Fiber& f : fibers) {
    if (f.wait == Wait::kBlockBarrier) {
      for (const Fiber& g : fibers) {
        if (g.wait != Wait::kBlockBarrier && g.wait != Wait::kDone) {
          Deadlock("__syncthreads is not reached by every thread", f, &g);
        }
      }
    }
  }
  Fail("kernel %s: no thread can make progress", scheduler.name);
}

void RunBlock(Scheduler& s, const uint3& block_idx, dim3 block, dim3 grid, bool reverse) {
  const int n = static_cast<int>(block.x * block.y * block.z);
  s.fibers.resize(n);
  for (int i = 0; i < n; ++i) {
    Fiber& f = s.fibers[i];
    f.state.thread_idx = make_uint3(i % block.x, i / block.x % block.y, i / (block.x * block.y));
    f.state.block_idx = block_idx;
    f.state.block_dim = block;
    f.state.grid_dim = grid;
    f.state.linear = i;
    f.wait = Wait::kRunnable;
    f.mask = 0;
    f.sp = InitialStack(s.stacks.Stack(i) + kStackBytes);
  }
  if (s.shared_bytes > 0) std::memset(s.shared.data, 0xFF, s.shared_bytes);
  for (;;) {
    for (int k = 0; k < n; ++k) {
      Fiber& f = s.fibers[reverse ? n - 1 - k : k];
      if (f.wait != Wait::kRunnable) continue;
      s.current = &f;
      MtEmuSwitch(&s.main_sp, f.sp);
    }
    s.current = nullptr;
    bool all_done = true;
    bool all_at_block_barrier = true;
    for (const Fiber& f : s.fibers) {
      if (f.wait != Wait::kDone) all_done = false;
      if (f.wait != Wait::kDone && f.wait != Wait::kBlockBarrier) all_at_block_barrier = false;
    }
    if (all_done) return;
    if (ReleaseWarpBarriers(s.fibers)) continue;
    if (all_at_block_barrier) {
      for (Fiber& f : s.fibers) {
        if (f.wait == Wait::kBlockBarrier) f.wait = Wait::kRunnable;
      }
      continue;
    }
    ReportDeadlock(s.fibers);
  }
}

std::mutex attribute_mutex;
std::map<const void*, int>& Attributes() {
  static auto* attributes = new std::map<const void*, int>();
  return *attributes;
}

}  // namespace

void Fail(const char* format, ...) {
  std::fflush(stdout);
  std::fputs("CUDA emulator: ", stderr);
  va_list args;
  va_start(args, format);
  std::vfprintf(stderr, format, args);
  va_end(args);
  std::fputc('\n', stderr);
  std::abort();
}

void SetMaxDynamicShared(const void* kernel, int bytes) {
  std::lock_guard<std::mutex> lock(attribute_mutex);
  Attributes()[kernel] = bytes;
}

int MaxDynamicShared(const void* kernel) {
  std::lock_guard<std::mutex> lock(attribute_mutex);
  const auto it = Attributes().find(kernel);
  return it == Attributes().end() ? kDefaultDynamicShared : it->second;
}

const ThreadState& Current() {
  const Fiber* f = scheduler.current;
  if (f == nullptr) Fail("a CUDA built-in (threadIdx, a barrier, ...) used outside a kernel");
  return f->state;
}

void* DynamicSharedMemory() {
  Current();
  return scheduler.shared_bytes > 0 ? scheduler.shared.data : nullptr;
}

void SyncThreads() {
  Scheduler& s = scheduler;
  Current();
  s.current->wait = Wait::kBlockBarrier;
  Yield();
}

void SyncWarp(unsigned mask) {
  Scheduler& s = scheduler;
  const int lane = Current().linear % kWarp;
  if ((mask >> lane & 1u) == 0) {
    Fail("kernel %s: a lane calls __syncwarp or a shuffle with a mask that omits itself", s.name);
  }
  s.current->wait = Wait::kWarpBarrier;
  s.current->mask = mask;
  Yield();
}

uint64_t WarpExchange(unsigned mask, uint64_t bits, int src_lane) {
  Scheduler& s = scheduler;
  const int linear = Current().linear;
  if ((mask >> src_lane & 1u) == 0) {
    Fail("kernel %s: a shuffle reads lane %d, which is not in its mask 0x%08x", s.name, src_lane,
         mask);
  }
  s.current->slot = bits;
  SyncWarp(mask);  // Every live lane of the mask has deposited.
  // A source lane that has exited (or does not exist) deposited nothing: undefined in CUDA, NaN
  // bits here. A live one cannot exit before the second barrier.
  const size_t src = static_cast<size_t>(linear / kWarp * kWarp + src_lane);
  const uint64_t result = src < s.fibers.size() && s.fibers[src].wait != Wait::kDone
                              ? s.fibers[src].slot
                              : ~uint64_t{0};
  SyncWarp(mask);  // Every lane has read before any deposits again.
  return result;
}

void CheckKernelPointer(const void* p, const char* kernel, int index) {
  if (p != nullptr && !IsDeviceRange(p, 0)) {
    Fail("kernel %s: argument %d (%p) is not in device memory (cudaMalloc)", kernel, index, p);
  }
}

void RunGrid(const void* kernel, const char* name, dim3 grid, dim3 block, size_t shared_bytes,
             cudaStream_t stream, const std::function<void()>& body) {
  Scheduler& s = scheduler;
  if (s.running) Fail("kernel %s launched from inside kernel %s", name, s.name);
  const uint64_t threads = static_cast<uint64_t>(block.x) * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64 ||
      grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 ||
      grid.z > 65535) {
    SetLastError(cudaErrorInvalidConfiguration);
    return;
  }
  if (shared_bytes > static_cast<size_t>(MaxDynamicShared(kernel))) {
    SetLastError(cudaErrorInvalidValue);
    return;
  }
  // Launches alternate between the two thread orders unless MT_CUDA_EMU_REVERSE fixes one.
  const char* order = std::getenv("MT_CUDA_EMU_REVERSE");
  const bool fixed = order != nullptr && (order[0] == '0' || order[0] == '1');
  const bool reverse = fixed ? order[0] == '1' : (s.launches % 2 == 1);
  ++s.launches;
  DeviceAccess access;
  s.running = true;
  s.name = name;
  s.body = &body;
  s.stacks.Reserve(static_cast<int>(threads));
  s.shared_bytes = shared_bytes;
  if (shared_bytes > 0) s.shared.Allocate(shared_bytes);
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) {
        RunBlock(s, make_uint3(x, y, z), block, grid, reverse);
      }
    }
  }
  s.shared.Release();
  s.running = false;
  s.body = nullptr;
}

}  // namespace cuda_emu
}  // namespace mt
