// Two trial classes that CRUCIBLE_REGISTER_TRIAL registers under one name, "Net" (it drops the
// namespace); the loader must refuse to pick either.
#include "test_trials.h"

namespace v1 {
class Net : public crucible::testing::RecordingTrial {
 public:
  using RecordingTrial::RecordingTrial;
};
}  // namespace v1

namespace v2 {
class Net : public crucible::testing::SearchTrial {
 public:
  using SearchTrial::SearchTrial;
};
}  // namespace v2

CRUCIBLE_REGISTER_TRIAL(v1::Net);
CRUCIBLE_REGISTER_TRIAL(v2::Net);
