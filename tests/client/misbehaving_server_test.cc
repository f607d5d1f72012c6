// The client against servers that misbehave, played by a generic gRPC
// server that sends chosen bytes: a reply that does not parse ends the call
// with INTERNAL (never a silently shorter list, never a hang), a stream that
// stops short of the count it promised is an error, and a server that never
// answers costs the caller its deadline and no more, in the library and in
// the CLI (exit 2, naming the call and --timeout).
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "client/cli/commands.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/cli_error.h"
#include "tests/support/process.h"
#include "tests/support/status_matchers.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::CliErrorOf;
using ::tensormorph::testing::CliPath;
using ::tensormorph::testing::CommandResult;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::RunCommand;
using ::testing::AllOf;
using ::testing::HasSubstr;

// Answers each call of a method named in `replies` with those payloads, in
// order, then OK; a call of any other method is never answered (it ends
// when the client gives up).
class ScriptedServer {
 public:
  explicit ScriptedServer(std::map<std::string, std::vector<std::string>> r)
      : service_(std::move(r)) {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                       &port_);
    b.RegisterCallbackGenericService(&service_);
    server_ = b.BuildAndStart();
  }
  ~ScriptedServer() {
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(2));
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  class Reactor : public grpc::ServerGenericBidiReactor {
   public:
    explicit Reactor(const std::vector<std::string>* payloads)
        : payloads_(payloads) {
      StartRead(&request_);
    }
    void OnReadDone(bool ok) override {
      if (payloads_ != nullptr) Next();  // else wait for the cancellation
    }
    void OnWriteDone(bool ok) override {
      if (!ok) return End(grpc::Status::CANCELLED);
      Next();
    }
    void OnCancel() override { End(grpc::Status::CANCELLED); }
    void OnDone() override { delete this; }

   private:
    void Next() {
      if (next_ == payloads_->size()) return End(grpc::Status::OK);
      const std::string& p = (*payloads_)[next_++];
      grpc::Slice slice(p);
      buffer_ = grpc::ByteBuffer(&slice, 1);
      StartWrite(&buffer_);
    }
    void End(const grpc::Status& s) {
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_) return;
      finished_ = true;
      Finish(s);
    }
    const std::vector<std::string>* payloads_;
    grpc::ByteBuffer request_, buffer_;
    size_t next_ = 0;
    std::mutex mu_;
    bool finished_ = false;
  };

  class Service : public grpc::CallbackGenericService {
   public:
    explicit Service(std::map<std::string, std::vector<std::string>> r)
        : replies_(std::move(r)) {}
    grpc::ServerGenericBidiReactor* CreateReactor(
        grpc::GenericCallbackServerContext* ctx) override {
      const std::string& m = ctx->method();
      auto it = replies_.find(m.substr(m.rfind('/') + 1));
      return new Reactor(it == replies_.end() ? nullptr : &it->second);
    }

   private:
    const std::map<std::string, std::vector<std::string>> replies_;
  };

  Service service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

// A TensorInfo as bytes; protobuf serializes a name that is not UTF-8 (it
// only logs), exactly as a server without the wire check would.
std::string Tensor(const std::string& name, int64_t list_count) {
  v1::TensorInfo t;
  t.set_name(name);
  t.set_list_count(list_count);
  return t.SerializeAsString();
}

std::unique_ptr<Client> Connect(const ScriptedServer& s,
                                absl::Duration timeout = absl::Seconds(20)) {
  ClientOptions o;
  o.timeout = timeout;
  return *Client::Connect(s.address(), o);
}

TEST(MisbehavingServerTest, AnUnparseableReplyMidStreamIsInternalNotAHang) {
  ScriptedServer s(
      {{"ListTensors", {Tensor("a", 3), Tensor("b\xE3", 3), Tensor("c", 3)}}});
  const absl::Time start = absl::Now();
  auto tensors = Connect(s)->ListTensors("x.gguf");
  EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "waited for a status";
  ASSERT_FALSE(tensors.ok());
  EXPECT_THAT(tensors,
              AllOf(HasReason(ErrorReason::kInternal),
                    MessageNames("ListTensors"), MessageNames("message 2"),
                    MessageNames("tensormorph.v1.TensorInfo")));
}

TEST(MisbehavingServerTest, AnUnparseableLastReplyIsInternalNotAShortList) {
  ScriptedServer s(
      {{"ListTensors", {Tensor("a", 3), Tensor("b", 3), Tensor("z\xFF", 3)}}});
  auto tensors = Connect(s)->ListTensors("x.gguf");
  ASSERT_FALSE(tensors.ok()) << "listed " << tensors->size();
  EXPECT_THAT(tensors, HasReason(ErrorReason::kInternal));
}

TEST(MisbehavingServerTest, AStreamShortOfItsPromisedCountIsInternal) {
  ScriptedServer s({{"ListTensors", {Tensor("a", 3), Tensor("b", 3)}}});
  auto tensors = Connect(s)->ListTensors("x.gguf");
  ASSERT_FALSE(tensors.ok());
  EXPECT_THAT(tensors, AllOf(HasReason(ErrorReason::kInternal),
                             MessageNames("2 of the 3")));
}

TEST(MisbehavingServerTest, AnUnparseableUnaryReplyIsInternal) {
  v1::GetCheckpointResponse info;
  info.add_metadata()->set_value("caf\xE9");
  ScriptedServer s({{"GetCheckpoint", {info.SerializeAsString()}}});
  auto got = Connect(s)->GetCheckpoint("x.gguf");
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(got, AllOf(HasReason(ErrorReason::kInternal),
                         MessageNames("GetCheckpoint")));
}

TEST(MisbehavingServerTest, AServerThatNeverAnswersCostsTheDeadline) {
  ScriptedServer s({});
  auto client = Connect(s, absl::Milliseconds(300));
  for (bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "stream" : "unary");
    const absl::Time start = absl::Now();
    absl::Status st = stream ? client->ListTensors("x.gguf").status()
                             : client->GetCheckpoint("x.gguf").status();
    const absl::Duration took = absl::Now() - start;
    EXPECT_GE(took, absl::Milliseconds(250));
    EXPECT_LT(took, absl::Seconds(5));
    EXPECT_THAT(st,
                AllOf(HasReason(ErrorReason::kDeadlineExceeded),
                      MessageNames(stream ? "ListTensors" : "GetCheckpoint"),
                      MessageNames("300ms")));
  }
}

TEST(MisbehavingServerTest, UnaryCallsHaveAFiniteDefaultDeadline) {
  // Not waited for (60 s): the default is what the options leave in place.
  EXPECT_EQ(ClientOptions().timeout, std::nullopt);
  EXPECT_EQ(kDefaultUnaryTimeout, absl::Seconds(60));
}

TEST(MisbehavingServerTest, TheCliTimesOutWithExit2NamingTheCallAndFlag) {
  ScriptedServer s({});
  for (const std::string cmd : {"info", "ls"}) {
    SCOPED_TRACE(cmd);
    const absl::Time start = absl::Now();
    CommandResult r = RunCommand({CliPath(), "--server", s.address(),
                                  "--timeout", "0.5", cmd, "x.gguf"});
    EXPECT_LT(absl::Now() - start, absl::Seconds(10));
    EXPECT_EQ(r.exit_code, kExitCallFailed) << r.err;
    // The error line names the call, and the hint line after it the flag
    // that sets its deadline.
    EXPECT_THAT(
        CliErrorOf(r.err),
        AllOf(HasReason(ErrorReason::kDeadlineExceeded),
              MessageNames(cmd == "info" ? "GetCheckpoint" : "ListTensors")));
    const size_t hint = r.err.find("\nhint: ");
    ASSERT_NE(hint, std::string::npos) << r.err;
    EXPECT_THAT(r.err.substr(hint), HasSubstr("--timeout"));
  }
}

TEST(MisbehavingServerTest, TheCliReportsAnUnparseableListWithExit2) {
  ScriptedServer s(
      {{"ListTensors", {Tensor("a", 3), Tensor("b\xE3", 3), Tensor("c", 3)}}});
  CommandResult r = RunCommand(
      {CliPath(), "--server", s.address(), "--timeout", "20", "ls", "x.gguf"});
  EXPECT_EQ(r.exit_code, kExitCallFailed) << r.out;
  EXPECT_THAT(CliErrorOf(r.err), HasReason(ErrorReason::kInternal));
}

}  // namespace
}  // namespace tensormorph
