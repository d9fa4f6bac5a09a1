// freed-object.cpp - a C++ program that calls a virtual method through a dangling pointer, for
// tests/debug-preload.sh: in debug mode the freed object's first word points at libfastmm5's
// trap table, so the call is reported as FASTMM_EVENT_VIRTUAL_CALL_ON_FREED_OBJECT (with the
// block's allocation and free stack traces) instead of jumping into freed memory.
#include <cstdio>

struct Shape {
    virtual ~Shape() {}
    virtual double area() const { return 0; }
    double padding[4] = {1, 2, 3, 4}; // a block well above the 16 bytes the marker needs
};

struct Square : Shape {
    double side = 2;
    double area() const override { return side * side; }
};

__attribute__((noinline)) Shape *make_square() { return new Square; }

int main()
{
    Shape *volatile s = make_square();
    std::printf("area %.1f\n", s->area());
    delete s;
    std::printf("after delete: %.1f\n", s->area()); // the bug: a call through a dangling pointer
    std::puts("done");
    return 0;
}
