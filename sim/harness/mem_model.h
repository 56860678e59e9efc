// The C++ memory model behind the core's memory port (docs/architecture.md,
// "Memory port protocol" and "RTL executor").
//
// Timing, per clock cycle (one call of drive() then one of commit()):
//
// - Commands are served strictly in the order they were accepted (a read accepted
//   after a write sees its data). At most `max_outstanding` commands are accepted
//   and not complete; beyond that `cmd.ready` is low.
// - A read command accepted at clock edge t may hand over its first beat at edge
//   t + read_latency at the earliest; a write command may take its first beat at
//   edge t + write_latency. Later beats of a burst follow one per cycle.
// - Read beats are produced into a buffer of `read_buffer` beats (copied from
//   memory when produced, in command order) and offered on `rdata` from there,
//   so a master that does not take them stalls the model, not the data.
// - `bandwidth` caps the bytes moved per cycle over both directions: below one
//   beat per cycle a credit of `bandwidth` bytes accrues every cycle (at most four
//   beats' worth) and every beat costs one beat's bytes. The port moves at most
//   one read and one write beat per cycle, and only the head command moves data,
//   so the model never exceeds one beat per cycle.
//
// With `onchip` set, the model is instead the SoC's on-chip memory
// (hw/soc/memory.py, OnChipMemory) cycle for cycle, and the other fields are unused:
// one command at a time (cmd.ready only when idle); a write takes its beats from the
// cycle after its command; a read issues one RAM read a cycle from the cycle after its
// command while its three-beat output queue has room (beats queued plus the one in the
// RAM), a beat entering the queue the cycle after its read and offered from the next;
// the next command is taken once the last read is issued.
//
// With `bandwidth >= bus bytes`, `write_latency == read_latency == L` and
// `max_outstanding == 4`, this is exactly the cocotb model of tests/rtl/mem_model.py
// with latency (L-1, L-1) and no random back-pressure.
#ifndef TENSORFAB_MEM_MODEL_H_
#define TENSORFAB_MEM_MODEL_H_

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

namespace tf {

struct MemConfig {
    uint32_t read_latency = 20;     // edges from a read command to its first beat (>= 1)
    uint32_t write_latency = 1;     // edges from a write command to its first beat (>= 1)
    uint32_t bandwidth = 8;         // bytes per cycle; >= bus bytes: one beat per cycle
    uint32_t max_outstanding = 16;  // accepted commands not yet complete
    uint32_t read_buffer = 8;       // read beats produced and not yet delivered
    uint32_t onchip = 0;            // 1: the SoC's on-chip memory (see above)
};

// Indices of MemModel::stats (names in kStatNames, exported to Python).
enum Stat : int {
    ST_READ_CMDS,
    ST_WRITE_CMDS,
    ST_BYTES_READ,
    ST_BYTES_WRITTEN,
    ST_BYTES_FETCH,
    ST_BYTES_LOAD_UOP,
    ST_BYTES_LOAD_WGT,
    ST_BYTES_LOAD_INP,
    ST_BYTES_LOAD_ACC,
    ST_BYTES_LOAD_OTHER,
    ST_READ_STALL_CYCLES,
    ST_COUNT
};

inline const char* kStatNames =
    "read_cmds,write_cmds,bytes_read,bytes_written,bytes_fetch,bytes_load_uop,"
    "bytes_load_wgt,bytes_load_inp,bytes_load_acc,bytes_load_other,read_stall_cycles";

struct MemCmd {
    uint64_t addr;
    uint64_t start;  // cycle from which its beats may move
    uint32_t beats;
    uint32_t done;
    bool write;
};

class MemModel {
  public:
    explicit MemModel(uint32_t bus_bytes) : bb_(bus_bytes) { configure(MemConfig{}); }

    // ---------------------------------------------------------------- set-up
    bool configure(const MemConfig& c) {
        if (c.read_latency < 1 || c.write_latency < 1 || c.bandwidth < 1
            || c.max_outstanding < 1 || c.read_buffer < 1)
            return false;
        cfg_ = c;
        limited_ = c.bandwidth < bb_;
        rbuf_.assign(static_cast<size_t>(c.read_buffer) * bb_, 0);
        reset();
        return true;
    }
    const MemConfig& config() const { return cfg_; }

    void reset() {
        pending_.clear();
        rhead_ = rcount_ = 0;
        credit_ = 0;
        oc_state_ = OC_IDLE;
        oc_queue_.clear();
        oc_in_flight_ = oc_issue_ = false;
        cycle_ = 0;
        load_cur_ = 0;
        load_left_ = load_plan_.empty() ? 0 : load_plan_[0].first;
        fetch_left_ = insn_hi_ - insn_lo_;
        std::memset(stats, 0, sizeof(stats));
        fault.clear();
        cmd_ready = wdata_ready = rdata_valid = false;  // until the next drive()
    }

    std::vector<uint8_t> data;

    // Byte range of the instruction stream. The fetch unit reads each instruction
    // once, so the first hi - lo bytes read inside the range count as fetch bytes;
    // every other read (a LOAD may read the stream as data) counts as load bytes, as
    // the functional simulator counts them.
    void set_insn_region(uint64_t lo, uint64_t hi) {
        insn_lo_ = lo;
        insn_hi_ = hi;
        fetch_left_ = hi - lo;
    }

    // Bytes and buffer of each LOAD in load-engine order: read bytes outside the
    // instruction stream are attributed to them in order.
    void set_load_plan(std::vector<std::pair<uint64_t, uint8_t>> plan) {
        load_plan_ = std::move(plan);
        load_cur_ = 0;
        load_left_ = load_plan_.empty() ? 0 : load_plan_[0].first;
    }

    // -------------------------------------------------------------- per cycle
    // Outputs for this cycle.
    bool cmd_ready = false;
    bool wdata_ready = false;
    bool rdata_valid = false;
    const uint8_t* rdata() const {
        return cfg_.onchip ? oc_queue_.front().data() : &rbuf_[rhead_ * bb_];
    }

    // Drive the outputs of the coming cycle (before the edge).
    inline void drive() {
        ++cycle_;
        if (cfg_.onchip) {
            cmd_ready = oc_state_ == OC_IDLE;
            wdata_ready = oc_state_ == OC_WRITE;
            rdata_valid = !oc_queue_.empty();
            oc_issue_ = oc_state_ == OC_READ && oc_queue_.size() + oc_in_flight_ < kOcQueue;
            return;
        }
        if (limited_) {
            credit_ += cfg_.bandwidth;
            const int64_t cap = 4 * static_cast<int64_t>(bb_);
            if (credit_ > cap) credit_ = cap;
        }
        MemCmd* head = pending_.empty() ? nullptr : &pending_.front();
        if (head && !head->write && cycle_ >= head->start && rcount_ < cfg_.read_buffer
            && take_credit()) {
            produce_beat(*head);
            if (++head->done == head->beats) {
                pending_.pop_front();
                head = pending_.empty() ? nullptr : &pending_.front();
            }
        } else if (head && !head->write) {
            ++stats[ST_READ_STALL_CYCLES];
        }
        cmd_ready = pending_.size() < cfg_.max_outstanding;
        wdata_ready = head && head->write && cycle_ >= head->start
                      && (!limited_ || credit_ >= static_cast<int64_t>(bb_));
        rdata_valid = rcount_ > 0;
    }

    // The handshakes the edge completes. `cmd_word` holds the command payload
    // (low 64 bits); `wdata` the write beat's bytes. Returns false on a fault.
    template <unsigned AOFF, unsigned AW, unsigned WOFF, unsigned LOFF, unsigned LW>
    inline bool commit(bool cmd_valid, uint64_t cmd_word, bool wdata_valid,
                       const uint8_t* wdata, bool rdata_ready) {
        if (cfg_.onchip) {
            return commit_onchip<AOFF, AW, WOFF, LOFF, LW>(cmd_valid, cmd_word, wdata_valid,
                                                           wdata, rdata_ready);
        }
        if (cmd_valid && cmd_ready) {
            MemCmd c;
            c.addr = (cmd_word >> AOFF) & mask(AW);
            c.write = (cmd_word >> WOFF) & 1;
            c.beats = static_cast<uint32_t>((cmd_word >> LOFF) & mask(LW)) + 1;
            c.done = 0;
            c.start = cycle_ + (c.write ? cfg_.write_latency : cfg_.read_latency);
            if (!check_range(c)) return false;
            ++stats[c.write ? ST_WRITE_CMDS : ST_READ_CMDS];
            pending_.push_back(c);
        }
        if (wdata_valid && wdata_ready) {
            MemCmd& head = pending_.front();
            std::memcpy(&data[head.addr + static_cast<uint64_t>(head.done) * bb_], wdata, bb_);
            stats[ST_BYTES_WRITTEN] += bb_;
            if (limited_) credit_ -= bb_;
            if (++head.done == head.beats) pending_.pop_front();
        }
        if (rdata_valid && rdata_ready) {
            rhead_ = (rhead_ + 1 == cfg_.read_buffer) ? 0 : rhead_ + 1;
            --rcount_;
        }
        return true;
    }

    // No command pending and no read beat waiting for delivery.
    bool idle() const {
        if (cfg_.onchip) return oc_state_ == OC_IDLE && oc_queue_.empty() && !oc_in_flight_;
        return pending_.empty() && rcount_ == 0;
    }
    size_t pending() const {
        if (cfg_.onchip) return oc_state_ != OC_IDLE || !oc_queue_.empty() || oc_in_flight_;
        return pending_.size();
    }
    uint64_t cycle() const { return cycle_; }

    uint64_t stats[ST_COUNT] = {};
    std::string fault;

  private:
    static constexpr uint64_t mask(unsigned w) { return w >= 64 ? ~0ULL : (1ULL << w) - 1; }

    template <unsigned AOFF, unsigned AW, unsigned WOFF, unsigned LOFF, unsigned LW>
    inline bool commit_onchip(bool cmd_valid, uint64_t cmd_word, bool wdata_valid,
                              const uint8_t* wdata, bool rdata_ready) {
        // the output queue: a beat taken leaves, the beat read last cycle enters
        if (rdata_valid && rdata_ready) oc_queue_.pop_front();
        if (oc_in_flight_) oc_queue_.push_back(oc_read_);
        oc_in_flight_ = oc_issue_;
        if (oc_issue_) {
            const uint64_t addr = oc_addr_ * bb_;
            oc_read_.assign(&data[addr], &data[addr] + bb_);
            account_read(addr);
        }
        switch (oc_state_) {
        case OC_IDLE:
            if (cmd_valid) {
                MemCmd c;
                c.addr = (cmd_word >> AOFF) & mask(AW);
                c.write = (cmd_word >> WOFF) & 1;
                c.beats = static_cast<uint32_t>((cmd_word >> LOFF) & mask(LW)) + 1;
                if (!check_range(c)) return false;
                ++stats[c.write ? ST_WRITE_CMDS : ST_READ_CMDS];
                oc_addr_ = c.addr / bb_;
                oc_left_ = c.beats - 1;
                oc_state_ = c.write ? OC_WRITE : OC_READ;
            }
            break;
        case OC_WRITE:
            if (wdata_valid) {
                std::memcpy(&data[oc_addr_ * bb_], wdata, bb_);
                stats[ST_BYTES_WRITTEN] += bb_;
                ++oc_addr_;
                if (oc_left_-- == 0) oc_state_ = OC_IDLE;
            }
            break;
        case OC_READ:
            if (oc_issue_) {
                ++oc_addr_;
                if (oc_left_-- == 0) oc_state_ = OC_IDLE;
            }
            break;
        }
        return true;
    }

    inline bool take_credit() {
        if (!limited_) return true;
        if (credit_ >= static_cast<int64_t>(bb_)) {
            credit_ -= bb_;
            return true;
        }
        return false;
    }

    inline void produce_beat(const MemCmd& c) {
        const uint64_t addr = c.addr + static_cast<uint64_t>(c.done) * bb_;
        uint32_t slot = rhead_ + rcount_;
        if (slot >= cfg_.read_buffer) slot -= cfg_.read_buffer;
        std::memcpy(&rbuf_[static_cast<size_t>(slot) * bb_], &data[addr], bb_);
        ++rcount_;
        account_read(addr);
    }

    // Count a beat read at `addr` as fetch, load (by the load plan) or other bytes.
    inline void account_read(uint64_t addr) {
        stats[ST_BYTES_READ] += bb_;
        if (addr >= insn_lo_ && addr < insn_hi_ && fetch_left_ > 0) {
            stats[ST_BYTES_FETCH] += bb_;
            fetch_left_ = fetch_left_ > bb_ ? fetch_left_ - bb_ : 0;
        } else if (load_cur_ < load_plan_.size()) {
            stats[ST_BYTES_LOAD_UOP + load_plan_[load_cur_].second] += bb_;
            load_left_ = load_left_ > bb_ ? load_left_ - bb_ : 0;
            while (load_left_ == 0 && load_cur_ < load_plan_.size()) {
                if (++load_cur_ < load_plan_.size()) load_left_ = load_plan_[load_cur_].first;
            }
        } else {
            stats[ST_BYTES_LOAD_OTHER] += bb_;
        }
    }

    bool check_range(const MemCmd& c) {
        const uint64_t n = static_cast<uint64_t>(c.beats) * bb_;
        char buf[256];
        if (c.addr % bb_) {
            std::snprintf(buf, sizeof buf, "%s command at %#llx is not aligned to a %u-byte beat",
                          c.write ? "write" : "read", static_cast<unsigned long long>(c.addr), bb_);
        } else if (c.addr + n > data.size()) {
            std::snprintf(buf, sizeof buf,
                          "%s of %llu bytes at %#llx runs past the %#llx-byte memory",
                          c.write ? "write" : "read", static_cast<unsigned long long>(n),
                          static_cast<unsigned long long>(c.addr),
                          static_cast<unsigned long long>(data.size()));
        } else {
            return true;
        }
        fault = buf;
        return false;
    }

    uint32_t bb_;
    MemConfig cfg_;
    bool limited_ = false;
    std::deque<MemCmd> pending_;
    std::vector<uint8_t> rbuf_;
    uint32_t rhead_ = 0, rcount_ = 0;
    int64_t credit_ = 0;
    uint64_t cycle_ = 0;
    uint64_t insn_lo_ = 0, insn_hi_ = 0, fetch_left_ = 0;
    std::vector<std::pair<uint64_t, uint8_t>> load_plan_;
    size_t load_cur_ = 0;
    uint64_t load_left_ = 0;
    // the on-chip memory (onchip)
    enum OcState { OC_IDLE, OC_WRITE, OC_READ };
    static constexpr size_t kOcQueue = 3;  // hw/soc/memory.py's _OUT_DEPTH
    OcState oc_state_ = OC_IDLE;
    uint64_t oc_addr_ = 0;  // in beats
    uint32_t oc_left_ = 0;
    bool oc_issue_ = false, oc_in_flight_ = false;
    std::vector<uint8_t> oc_read_;
    std::deque<std::vector<uint8_t>> oc_queue_;
};

}  // namespace tf

#endif  // TENSORFAB_MEM_MODEL_H_
