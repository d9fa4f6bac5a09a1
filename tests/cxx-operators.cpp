// cxx-operators.cpp - a C++ program whose new and delete expressions are libfastmm5's operators
// under LD_PRELOAD, for tests/debug-preload.sh:
//   throw      a new that nothing can satisfy calls the new-handler, then throws std::bad_alloc
//              through libfastmm5's frames to the catch here; nothrow new returns nullptr; a
//              sized delete of a 40-byte block with size 100 is reported (libstdc++'s own
//              operators would pass it to free without a word).
//   mismatch   new[] released by delete: in debug mode reported as a mismatched deallocation.
#include <cstdio>
#include <cstring>
#include <new>

static int handler_calls;

static void handler()
{
    handler_calls++;
    std::set_new_handler(nullptr); // the next failure throws
}

__attribute__((noinline)) int *make_array() { return new int[10]; }

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "throw";
    if (std::strcmp(mode, "throw") == 0) {
        volatile std::size_t huge = ~(std::size_t)0 / 2 + 4096; // above PTRDIFF_MAX: always refused
        std::set_new_handler(handler);
        try {
            char *p = new char[huge];
            std::printf("new returned %p\n", static_cast<void *>(p));
        } catch (const std::bad_alloc &) {
            std::printf("caught bad_alloc after %d handler call(s)\n", handler_calls);
        }
        void *q = ::operator new(huge, std::nothrow);
        std::printf("nothrow new: %s\n", q == nullptr ? "nullptr" : "a block");
        ::operator delete(::operator new(40), 100); // a sized delete with the wrong size: reported
    } else {
        int *p = make_array();
        p[0] = 1;
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
        delete p;
    }
    std::printf("done\n");
    return 0;
}
