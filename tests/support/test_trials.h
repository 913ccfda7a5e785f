#pragma once

// The small trials the tests drive, in process (TrialFactory::of) and as a plugin library
// (libcrucible_test_trials.so, registered in test_trials.cpp).

#include "gradient_trials.h"
#include "recording_trials.h"
#include "resumable_trial.h"
#include "search_trial.h"
