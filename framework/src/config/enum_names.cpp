#include "config/enum_names.h"

namespace crucible::config {

template <>
const util::NameTable<LengthUnit>& names<LengthUnit>() {
  static const util::NameTable<LengthUnit> table{{LengthUnit::kBatches, "batches"},
                                                 {LengthUnit::kEpochs, "epochs"},
                                                 {LengthUnit::kRecords, "records"}};
  return table;
}

template <>
const util::NameTable<CheckpointPolicy>& names<CheckpointPolicy>() {
  static const util::NameTable<CheckpointPolicy> table{{CheckpointPolicy::kBest, "best"},
                                                       {CheckpointPolicy::kAll, "all"},
                                                       {CheckpointPolicy::kNone, "none"}};
  return table;
}

template <>
const util::NameTable<DistributedBackend>& names<DistributedBackend>() {
  static const util::NameTable<DistributedBackend> table{{DistributedBackend::kAuto, "auto"},
                                                         {DistributedBackend::kGloo, "gloo"},
                                                         {DistributedBackend::kNccl, "nccl"}};
  return table;
}

template <>
const util::NameTable<SearcherName>& names<SearcherName>() {
  static const util::NameTable<SearcherName> table{{SearcherName::kSingle, "single"},
                                                   {SearcherName::kGrid, "grid"},
                                                   {SearcherName::kRandom, "random"},
                                                   {SearcherName::kAdaptiveAsha, "adaptive_asha"}};
  return table;
}

template <>
const util::NameTable<AshaMode>& names<AshaMode>() {
  static const util::NameTable<AshaMode> table{{AshaMode::kAggressive, "aggressive"},
                                               {AshaMode::kStandard, "standard"},
                                               {AshaMode::kConservative, "conservative"}};
  return table;
}

template <>
const util::NameTable<MixedPrecision>& names<MixedPrecision>() {
  static const util::NameTable<MixedPrecision> table{{MixedPrecision::kNone, "none"},
                                                     {MixedPrecision::kFp16, "fp16"},
                                                     {MixedPrecision::kBf16, "bf16"}};
  return table;
}

template <>
const util::NameTable<NonFinitePolicy>& names<NonFinitePolicy>() {
  static const util::NameTable<NonFinitePolicy> table{{NonFinitePolicy::kStop, "stop"},
                                                      {NonFinitePolicy::kSkip, "skip"}};
  return table;
}

template <>
const util::NameTable<HyperparameterSpec::Type>& names<HyperparameterSpec::Type>() {
  using Type = HyperparameterSpec::Type;
  static const util::NameTable<Type> table{{Type::kConst, "const"},
                                           {Type::kInt, "int"},
                                           {Type::kDouble, "double"},
                                           {Type::kLog, "log"},
                                           {Type::kCategorical, "categorical"}};
  return table;
}

}  // namespace crucible::config
