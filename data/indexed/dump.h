// The text dump printed by `bazel run //data:dump_dataset -- --prefix=PATH`.
#ifndef MT_DATA_INDEXED_DUMP_H_
#define MT_DATA_INDEXED_DUMP_H_

#include <ostream>

#include "data/indexed/indexed_dataset.h"

namespace mt {
namespace data {

// Writes
//   dtype: <u16|i32|...>
//   sequences: <N>
//   documents: <D>
// then one line per document: its token ids (all its sequences), space-separated; an empty
// document gives an empty line.
void WriteDump(const IndexedDataset& dataset, std::ostream& out);

}  // namespace data
}  // namespace mt

#endif  // MT_DATA_INDEXED_DUMP_H_
