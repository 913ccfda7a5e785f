#pragma once

// Calling the user's code (a trial's methods, its callbacks' hooks) so that whatever it throws
// comes out as an error that names the method.

#include <cxxabi.h>

#include <exception>
#include <string>

#include <crucible/errors.h>

namespace crucible::util {

// Inside a catch (...) handler, what it caught, which is not a std::exception, in words:
// "a value of type 'char const*', not a std::exception" (the type demangled), or "something that
// is not a std::exception" when the runtime cannot name its type.
std::string describe_foreign_exception();

// Runs `fn`, turning what a trial method throws into an error naming the method; `what()` is
// called only then, so naming costs nothing per batch. A crucible::Error keeps its exit code
// and is nested in the new one (see Error); any other std::exception, or a thrown value that is
// none (`throw 42;`), becomes a TrainingError "<what()> threw: ...". A thread's forced unwinding
// passes through.
template <class Name, class Fn>
auto call_trial(Name&& what, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const Error& e) {
    std::throw_with_nested(Error(std::string(what()) + ": " + e.what(), e.exit_code()));
  } catch (const std::exception& e) {
    throw TrainingError(std::string(what()) + " threw: " + message_without_trace(e));
  } catch (abi::__forced_unwind&) {
    throw;
  } catch (...) {
    throw TrainingError(std::string(what()) + " threw " + describe_foreign_exception());
  }
}

}  // namespace crucible::util
