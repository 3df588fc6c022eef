// cxx_throw.cc: C++ built as distributions build (g++ -O2, no frame
// pointers; workloads.mk) that throws and catches an exception every few
// calls, for SECONDS (default 2) of CPU: main -> run -> Parser::parse ->
// Parser::work, and __cxa_throw's unwinding (libstdc++, libgcc_s) from
// Parser::parse back to run's catch. The work is short enough that the
// throws take a few percent of the time: samples enough of them at 499 Hz
// however fast the machine unwinds.
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <stdexcept>

static uint64_t thread_cpu_ns()
{
	timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

volatile uint64_t sink;

struct Parser {
	__attribute__((noinline)) void work(int n)
	{
		volatile uint64_t x = 0;

		for (int i = 0; i < n; i++)
			x += (uint64_t)i * i;
		sink += x;
	}

	__attribute__((noinline)) void parse(int i)
	{
		work(2000);
		if (i % 3 == 0)
			throw std::runtime_error("malformed input");
		sink++;
	}
};

__attribute__((noinline)) static uint64_t run(double seconds)
{
	uint64_t end = thread_cpu_ns() + (uint64_t)(seconds * 1e9), errors = 0;
	Parser p;

	for (int i = 0; thread_cpu_ns() < end; i++) {
		try {
			p.parse(i);
		} catch (const std::exception &e) {
			errors++;
		}
	}
	return errors;
}

int main(int argc, char **argv)
{
	return run(argc > 1 ? atof(argv[1]) : 2.0) ? 0 : 1;
}
