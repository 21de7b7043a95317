// The floor under a native learner's gRPC handler: a C++ server (gRPC's
// callback API, generic bidirectional streams) that copies each request
// into one contiguous buffer, as a learner copying frames into its tables
// would, and answers 64 bytes. benchmarks/grpc_aio_floor.py --server cpp
// builds and runs it beside the grpc-aio server, with the same Python
// clients.
//
//   grpc_floor PORT_FILE WARMUP_S SECONDS
//
// Binds 127.0.0.1:0 with the learner's server options, writes the port to
// PORT_FILE, waits WARMUP_S, then prints one JSON line with the process's
// CPU (user + system, gRPC's own threads included) and wall seconds over
// the next SECONDS, and serves until killed.

#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/byte_buffer.h>

namespace {

double CpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec +
         1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double WallSeconds() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

class Stream : public grpc::ServerGenericBidiReactor {
 public:
  Stream() {
    static const std::vector<char> zeros(64, 0);
    grpc::Slice slice(zeros.data(), zeros.size());
    reply_ = grpc::ByteBuffer(&slice, 1);
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::OK);
      return;
    }
    // One copy of the payload into memory the handler owns (the slices
    // gRPC read from the socket are released with the buffer).
    std::vector<grpc::Slice> slices;
    request_.Dump(&slices);
    size_t n = 0;
    for (const auto& s : slices) n += s.size();
    if (payload_.size() < n) payload_.resize(n);
    size_t at = 0;
    for (const auto& s : slices) {
      std::memcpy(payload_.data() + at, s.begin(), s.size());
      at += s.size();
    }
    request_.Clear();
    StartWrite(&reply_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::CANCELLED);
      return;
    }
    StartRead(&request_);
  }

  void OnDone() override { delete this; }

 private:
  grpc::ByteBuffer request_, reply_;
  std::vector<unsigned char> payload_;
};

class Service : public grpc::CallbackGenericService {
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext*) override {
    return new Stream();
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s PORT_FILE WARMUP_S SECONDS\n", argv[0]);
    return 2;
  }
  const double warmup = std::atof(argv[2]), seconds = std::atof(argv[3]);
  Service service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  // The learner's server options (seed_rl/grpc/protocol.py,
  // server_options).
  builder.SetMaxSendMessageSize(64 << 20);
  builder.SetMaxReceiveMessageSize(64 << 20);
  builder.AddChannelArgument("grpc.so_reuseport", 0);
  builder.AddChannelArgument("grpc.keepalive_permit_without_calls", 1);
  builder.AddChannelArgument("grpc.keepalive_time_ms", 30000);
  builder.AddChannelArgument("grpc.keepalive_timeout_ms", 10000);
  builder.AddChannelArgument(
      "grpc.http2.min_recv_ping_interval_without_data_ms", 15000);
  builder.AddChannelArgument("grpc.http2.max_ping_strikes", 0);
  builder.RegisterCallbackGenericService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    std::fprintf(stderr, "grpc_floor: could not start the server\n");
    return 1;
  }
  {
    std::ofstream out(argv[1]);
    out << port << "\n";
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(warmup));
  const double c0 = CpuSeconds(), w0 = WallSeconds();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const double c1 = CpuSeconds(), w1 = WallSeconds();
  std::printf("{\"cpu_s\": %.6f, \"wall_s\": %.6f}\n", c1 - c0, w1 - w0);
  std::fflush(stdout);
  server->Wait();
  return 0;
}
