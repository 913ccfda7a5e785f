// A valid shared library that registers no trial.
extern "C" int not_a_trial_answer() { return 42; }
