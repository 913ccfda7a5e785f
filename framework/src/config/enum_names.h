#pragma once

#include <crucible/config.h>

#include "util/name_table.h"

namespace crucible::config {

// The spelling of each value of a config enum in experiment files, the resolved config and
// messages: the only table of it.
template <typename E>
const util::NameTable<E>& names();

template <>
const util::NameTable<LengthUnit>& names<LengthUnit>();
template <>
const util::NameTable<CheckpointPolicy>& names<CheckpointPolicy>();
template <>
const util::NameTable<DistributedBackend>& names<DistributedBackend>();
template <>
const util::NameTable<SearcherName>& names<SearcherName>();
template <>
const util::NameTable<AshaMode>& names<AshaMode>();
template <>
const util::NameTable<MixedPrecision>& names<MixedPrecision>();
template <>
const util::NameTable<NonFinitePolicy>& names<NonFinitePolicy>();
template <>
const util::NameTable<HyperparameterSpec::Type>& names<HyperparameterSpec::Type>();

}  // namespace crucible::config
