/*
 * fastmm5-symbolize - names the code addresses of a running process for libfastmm5's reports:
 * function (from .symtab when the object has one, else .dynsym; C++ names demangled) and
 * offset, then file:line where the object or its separate debug file has DWARF line tables
 * (elfutils' libdwfl; it asks debuginfod for missing debug files when DEBUGINFOD_URLS is set).
 *
 * libfastmm5 starts it when a report shows a stack trace (lib/symbolize.c), as a separate
 * program so that symbolization never runs on the heap it reports about, which may be damaged.
 *
 * Usage: fastmm5-symbolize PID. Reads one return address per line (hexadecimal) on standard
 * input and answers each with one line: "NAME+0xOFFSET<TAB>FILE:LINE", either part "-" when
 * unknown. A return address points after its call, so the call (address - 1) is looked up.
 * Exits at the end of its input.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elfutils/libdwfl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

typedef char *(*demangle_t)(const char *name, char *out, size_t *length, int *status);

/* libstdc++'s demangler, if the system has it: loaded at run time, so the helper has no C++
 * dependency. */
static demangle_t find_demangler(void)
{
    void *self = dlsym(RTLD_DEFAULT, "__cxa_demangle");
    if (self != NULL)
        return (demangle_t)self;
    void *lib = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_LOCAL);
    return lib != NULL ? (demangle_t)dlsym(lib, "__cxa_demangle") : NULL;
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash != NULL ? slash + 1 : path;
}

static void answer(Dwfl *dwfl, uintptr_t address, demangle_t demangle)
{
    Dwarf_Addr pc = address - 1;
    Dwfl_Module *module = dwfl_addrmodule(dwfl, pc);
    if (module == NULL) {
        fputs("-\t-\n", stdout);
        return;
    }
    GElf_Off offset = 0;
    GElf_Sym sym;
    const char *name = dwfl_module_addrinfo(module, pc, &offset, &sym, NULL, NULL, NULL);
    if (name != NULL) {
        char *plain = NULL;
        int status = -1;
        if (demangle != NULL && name[0] == '_' && name[1] == 'Z')
            plain = demangle(name, NULL, NULL, &status);
        printf("%s+0x%" PRIx64, plain != NULL && status == 0 ? plain : name, (uint64_t)offset + 1);
        free(plain);
    } else {
        fputs("-", stdout);
    }
    Dwfl_Line *line = dwfl_module_getsrc(module, pc);
    int number = 0;
    const char *file = line != NULL ? dwfl_lineinfo(line, NULL, &number, NULL, NULL, NULL) : NULL;
    if (file != NULL && number > 0)
        printf("\t%s:%d\n", base_name(file), number);
    else
        fputs("\t-\n", stdout);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: fastmm5-symbolize PID\n");
        return 2;
    }
    pid_t pid = (pid_t)strtol(argv[1], NULL, 10);
    static char *debuginfo_path;
    static const Dwfl_Callbacks callbacks = {
        .find_elf = dwfl_linux_proc_find_elf,
        .find_debuginfo = dwfl_standard_find_debuginfo,
        .debuginfo_path = &debuginfo_path,
    };
    Dwfl *dwfl = dwfl_begin(&callbacks);
    if (dwfl == NULL)
        return 1;
    dwfl_report_begin(dwfl);
    int failed = dwfl_linux_proc_report(dwfl, pid);
    dwfl_report_end(dwfl, NULL, NULL);
    if (failed != 0)
        return 1;
    demangle_t demangle = find_demangler();
    char text[64];
    while (fgets(text, sizeof text, stdin) != NULL) {
        uintptr_t address = (uintptr_t)strtoull(text, NULL, 16);
        if (address == 0)
            fputs("-\t-\n", stdout);
        else
            answer(dwfl, address, demangle);
        fflush(stdout);
    }
    dwfl_end(dwfl);
    return 0;
}
