#include "data/indexed/dump.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace mt {
namespace data {

void WriteDump(const IndexedDataset& dataset, std::ostream& out) {
  out << "dtype: " << TokenDTypeName(dataset.dtype()) << "\n"
      << "sequences: " << dataset.num_sequences() << "\n"
      << "documents: " << dataset.num_documents() << "\n";
  std::string line;
  for (int64_t d = 0; d < dataset.num_documents(); ++d) {
    const TokenView doc = dataset.document(d);
    line.clear();
    for (int64_t i = 0; i < doc.size(); ++i) {
      if (i > 0) line += ' ';
      absl::StrAppend(&line, doc[i]);
    }
    line += '\n';
    out << line;
  }
}

}  // namespace data
}  // namespace mt
