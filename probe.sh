cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null 2>&1 && cmake --build build-gpu --target cuda_zero_test cuda_training_test > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
build-gpu/bin/cuda_training_test > $OUT/training.log 2>&1; tail -3 $OUT/training.log
build-gpu/bin/cuda_zero_test > $OUT/zero.log 2>&1; grep -E 'FAILED|PASSED|tests ran' $OUT/zero.log | head
