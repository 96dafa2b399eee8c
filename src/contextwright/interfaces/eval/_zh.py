"""A Chinese evaluation set in LoCoMo's format, generated from templates (deterministic by seed).

LoCoMo is English. To measure recall on Chinese without translating anything,
`generate` writes conversations between two people over dated sessions from
templates of everyday life written in Chinese: pets, work and a move to
another city, a relative's wedding, a food habit that changes, hobbies, trips,
purchases, an old friend's shop. Every fact is said by one speaker in one turn,
and the questions are written so that the evidence is known by construction,
in LoCoMo's categories (the same numbers):

- 1 **multi-hop**: the answer joins two turns that share a name, not the
  question's words ("王芳的妹妹在哪里办的婚礼?" ← "我妹妹小雪下个月要结婚了" +
  "小雪的婚礼在杭州的一家茶园办的");
- 2 **temporal**: when something happened (the session's date answers it);
- 3 **open-domain / commonsense**: an inference from a hobby, phrased apart
  from the turns ("会不会喜欢去海岛度假?" ← swimming and a diving licence);
- 4 **single-hop**: one turn, including the *latest* of facts that change
  (where someone lives now);
- 5 **adversarial**: a question about the other speaker, whose evidence is the
  turn that says it of the first.

Between the facts, small talk from a pool fills each session, so that a small
budget holds only part of a conversation: by default five conversations of 16
sessions, 340-380 turns (5,400-6,000 cl100k tokens) and 30 questions each. The
same seed writes the same bytes. Open-domain questions share no words with
their evidence on purpose: lexical recall is expected to miss them.
``contextwright eval zh`` generates the set (``--write DIR`` keeps it) and
measures it as ``eval locomo`` does, with the engine's locale ``zh``.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["generate", "write_set"]

_PAIRS = [("王芳", "李明"), ("陈静", "张伟"), ("刘洋", "赵敏"), ("周婷", "吴磊"),
          ("孙悦", "郑浩"), ("黄蕾", "何军")]  # fmt: skip
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")  # fmt: skip
_CITIES = ["杭州", "成都", "厦门", "青岛", "西安", "昆明", "苏州", "大连", "长沙", "南京"]

_SMALL_TALK = [
    "最近天气变化好大,早上出门还得穿外套。", "这几天工作有点忙,每天都加班到八点多。",
    "周末在家睡了个懒觉,感觉整个人都活过来了。", "楼下新开了一家面馆,味道还可以。",
    "我这两天在追一部电视剧,剧情有点拖。", "昨晚下了好大的雨,地铁站门口全是水。",
    "最近开始早睡早起,感觉精神好多了。", "公司楼下的咖啡涨价了,一杯要三十多。",
    "这个月的电费比上个月高了不少。", "今天路上特别堵,迟到了十分钟。",
    "我妈又打电话催我多穿点衣服。", "最近总觉得时间过得特别快。",
    "小区里的桂花开了,走到哪儿都是香味。", "我把手机屏幕摔裂了,还没去修。",
    "这周开了三个会,什么正事都没干。", "中午随便吃了点外卖,没什么胃口。",
    "最近在学做饭,昨天的番茄炒蛋有点咸。", "今天阳光特别好,我在阳台晒了被子。",
    "快递又放错地方了,找了半天。", "我发现自己越来越不爱出门了。",
]  # fmt: skip
_REPLIES = [
    "哈哈,真的吗?", "听起来不错啊。", "那你可得注意身体。", "我也有同感。", "是啊,最近大家都这样。",
    "真羡慕你。", "那太好了!", "辛苦了,早点休息。", "有空一起出去走走吧。", "原来如此。",
    "这个我倒是没想到。", "加油,慢慢来。",
]  # fmt: skip
_HOBBIES: list[tuple[str, str, str]] = [  # (turn 1, turn 2, commonsense question)
    ("这个周末我又去体育馆游了两千米,一点都不累。", "我终于拿到潜水证了,下次想去看看珊瑚礁。",
     "{p}会喜欢去海岛度假吗?"),
    ("上周末我们爬了黄山,山顶的云海太美了。", "我新买了一双登山鞋,准备秋天去走一条长线。",
     "{p}可能会对户外露营感兴趣吗?"),
    ("我昨天烤了一盘蔓越莓饼干,邻居都说好吃。", "我在考虑换一台更大的烤箱,现在这个太小了。",
     "送{p}生日礼物,厨房用品和游戏机哪个更合适?"),
    ("最近在读一本推理小说,一晚上就看了一半。", "我办了一张市图书馆的借书证,每周都去借两本。",
     "{p}会喜欢逛书展吗?"),
    ("我用新相机拍了一组老街的照片,光线特别好。", "我报了一个周末的摄影课,学怎么用手动模式。",
     "{p}出门旅行时可能会带什么设备?"),
    ("我每天早上跑五公里,已经坚持三个月了。", "下个月我要参加人生第一个半程马拉松。",
     "{p}会对运动手表感兴趣吗?"),
]  # fmt: skip
_PETS = [("猫", ["橘色", "白色", "黑白花"], ["团子", "可乐", "年糕", "布丁"]),
         ("狗", ["棕色", "白色", "黑色"], ["豆豆", "旺财", "土豆", "球球"]),
         ("兔子", ["灰色", "白色"], ["雪球", "萝卜", "棉花"])]  # fmt: skip
_CHEWED = ["耳机线", "拖鞋", "沙发垫", "充电器", "窗帘"]
_JOBS = ["设计师", "会计", "程序员", "中学老师", "产品经理", "护士"]
_COMPANIES = ["广告公司", "银行", "互联网公司", "医院", "学校", "物流公司"]
_RELATIVES = [("妹妹", ["小雪", "晓琳", "思思"]), ("表哥", ["阿杰", "子豪"]),
              ("堂姐", ["小雪", "晓琳", "思思"]), ("弟弟", ["阿杰", "子豪"])]  # fmt: skip
_VENUES = ["的一家茶园", "的一家海边酒店", "郊外的一个农庄", "的一家草坪餐厅"]
_FOODS = [("吃火锅", "辣的", "吃清汤面"), ("吃炸鸡", "油炸的", "吃蒸鱼"),
          ("喝奶茶", "甜的", "喝柠檬水"), ("吃烧烤", "烤的", "吃蔬菜沙拉")]  # fmt: skip
_EVENTS = ["音乐节", "灯会", "车展", "马术比赛", "话剧"]
_ITEMS = [("扫地机器人", ["石头", "科沃斯"]), ("电动车", ["雅迪", "小牛"]),
          ("空气炸锅", ["美的", "九阳"]), ("平板电脑", ["华为", "小米"])]  # fmt: skip
_SHOPS = [("咖啡店", "桂花拿铁"), ("书店", "一本讲旅行的散文集"), ("花店", "一盆多肉"),
          ("面包店", "刚出炉的碱水面包")]  # fmt: skip


@dataclass
class _Conv:
    rng: random.Random
    sessions: int
    # per session: exchanges, each a list of (speaker, text, key or None)
    plan: list[list[list[tuple[str, str, str | None]]]] = field(default_factory=list)
    qa: list[tuple[str, list[str], int, str]] = field(
        default_factory=list
    )  # question, keys, cat, answer

    def say(self, s: int, speaker: str, other: str, text: str, key: str) -> None:
        """A fact turn in session ``s``, followed by the other speaker's reaction."""
        self.plan[s].append([(speaker, text, key), (other, self.rng.choice(_REPLIES), None)])

    def two(self) -> tuple[int, int]:
        a, b = sorted(self.rng.sample(range(self.sessions), 2))
        return a, b


def _plots(c: _Conv, p: str, o: str, hobbies: list[int], used: set[str]) -> None:
    """One speaker's facts and the questions about them (evidence by key)."""
    r = c.rng
    # a pet: its name (single-hop), the other speaker asked instead (adversarial),
    # and what it chewed, said under its name only (multi-hop)
    animal, colours, names = r.choice([x for x in _PETS if x[0] not in used])
    pet = r.choice(names)
    used.add(animal)  # the other speaker has no such animal: the adversarial question holds
    chewed = r.choice(_CHEWED)
    s1, s2 = c.two()
    c.say(
        s1,
        p,
        o,
        f"跟你说,我上个月领养了一只{r.choice(colours)}的{animal},给它取名叫{pet}。",
        f"{p}pet",
    )
    c.say(s2, p, o, f"{pet}昨天把我的{chewed}咬坏了,气死我了。", f"{p}chew")
    c.qa += [(f"{p}的{animal}叫什么名字?", [f"{p}pet"], 4, pet),
             (f"{o}的{animal}叫什么名字?", [f"{p}pet"], 5, pet),
             (f"{p}养的{animal}咬坏了什么?", [f"{p}pet", f"{p}chew"], 1, chewed)]  # fmt: skip
    # work, then a move: where they live now is the later turn (single-hop), when
    # they quit is that turn's date (temporal), the old job joins both (multi-hop)
    city1, city2 = r.sample([x for x in _CITIES if x not in used], 2)
    used.update((city1, city2))
    k = r.choice([i for i in range(len(_JOBS)) if _JOBS[i] not in used])
    used.add(_JOBS[k])
    job1, company, job2 = _JOBS[k], _COMPANIES[k], r.choice([j for j in _JOBS if j != _JOBS[k]])
    s1, s2 = c.two()
    c.say(s1, p, o, f"我现在在{city1}一家{company}当{job1},每天通勤一个小时。", f"{p}job")
    c.say(s2, p, o, f"告诉你个消息,我辞职了,下个月搬去{city2},到那边做{job2}。", f"{p}move")
    c.qa += [(f"{p}现在住在哪个城市?", [f"{p}move"], 4, city2),
             (f"{p}是什么时候决定辞职的?", [f"{p}move"], 2, "the date of that session"),
             (f"{p}搬家之前在什么单位上班?", [f"{p}job", f"{p}move"], 1, company)]  # fmt: skip
    # a relative's wedding: announced by relation, told by name (multi-hop)
    rel, rnames = r.choice(_RELATIVES)
    rname = r.choice([n for n in rnames if n not in used])
    used.add(rname)
    city, venue = r.choice([x for x in _CITIES if x not in used]), r.choice(_VENUES)
    s1, s2 = c.two()
    c.say(s1, p, o, f"我{rel}{rname}下个月要结婚了,我得回去帮忙准备。", f"{p}rel")
    c.say(s2, p, o, f"{rname}的婚礼在{city}{venue}办的,来了好多亲戚。", f"{p}wed")
    c.qa += [(f"{p}的{rel}在哪里办的婚礼?", [f"{p}rel", f"{p}wed"], 1, f"{city}{venue}"),
             (f"{p}是什么时候去参加婚礼的?", [f"{p}wed"], 2, "the date of that session")]  # fmt: skip
    # a food habit that changes: what they eat now (single-hop), why not the old one
    food, kind, instead = r.choice([x for x in _FOODS if x[0] not in used])
    used.add(food)
    s1, s2 = c.two()
    c.say(s1, p, o, f"我最爱{food}了,一个星期至少两回。", f"{p}food")
    c.say(s2, p, o, f"医生说{kind}我得少碰,所以我最近改成{instead}了。", f"{p}diet")
    c.qa += [(f"{p}最近的饮食习惯是什么?", [f"{p}diet"], 4, instead),
             (f"{p}以前最爱吃的东西现在为什么不常吃了?", [f"{p}food", f"{p}diet"], 1, "医生")]  # fmt: skip
    # hobbies: a commonsense question phrased apart from both turns
    for h in hobbies:
        t1, t2, q = _HOBBIES[h]
        s1, s2 = c.two()
        c.say(s1, p, o, t1, f"{p}h{h}a")
        c.say(s2, p, o, t2, f"{p}h{h}b")
        c.qa.append((q.format(p=p), [f"{p}h{h}a", f"{p}h{h}b"], 3, "yes"))
    # a trip to an event (temporal), a purchase (single-hop), an old friend's shop (multi-hop)
    event = r.choice([e for e in _EVENTS if e not in used])
    used.add(event)
    where = r.choice(_CITIES)
    c.say(r.randrange(c.sessions), p, o, f"我上周末专门去{where}看了{event},人山人海。", f"{p}trip")
    c.qa.append((f"{p}什么时候去看的{event}?", [f"{p}trip"], 2, "the week before that session"))
    item, brands = r.choice([x for x in _ITEMS if x[0] not in used])
    used.add(item)
    brand = r.choice(brands)
    c.say(r.randrange(c.sessions), p, o, f"我终于买了{item},挑了半天选的{brand}。", f"{p}buy")
    c.qa.append((f"{p}买的{item}是什么牌子的?", [f"{p}buy"], 4, brand))
    shop, tip = r.choice([x for x in _SHOPS if x[0] not in used])
    used.add(shop)
    friend = r.choice([n for n in ("林琳", "高远", "宋佳", "马超") if n not in used])
    used.add(friend)
    s1, s2 = c.two()
    c.say(s1, p, o, f"我大学室友{friend}辞职开了一家{shop},我打算去捧场。", f"{p}mate")
    c.say(s2, p, o, f"周末去{friend}那儿坐了一下午,{friend}推荐我{tip}。", f"{p}visit")
    c.qa.append((f"{p}的大学室友给{p}推荐了什么?", [f"{p}mate", f"{p}visit"], 1, tip))


def generate(seed: int = 0, conversations: int = 5, sessions: int = 16) -> list[dict[str, Any]]:
    """``conversations`` conversations in LoCoMo's format (one JSON object each)."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for i in range(conversations):
        a, b = _PAIRS[i % len(_PAIRS)]
        c = _Conv(rng, sessions, [[] for _ in range(sessions)])
        hobbies = rng.sample(range(len(_HOBBIES)), 4)
        used: set[str] = set()
        _plots(c, a, b, hobbies[:2], used)
        _plots(c, b, a, hobbies[2:], used)
        data: dict[str, Any] = {"speaker_a": a, "speaker_b": b}
        ids: dict[str, str] = {}
        day = 10 + rng.randrange(300)  # days after 2023-01-01
        for s, facts in enumerate(c.plan):
            day += 5 + rng.randrange(20)
            exchanges = list(facts)
            for _ in range(7 + rng.randrange(6)):
                who, other = (a, b) if rng.random() < 0.5 else (b, a)
                exchanges.append(
                    [(who, rng.choice(_SMALL_TALK), None), (other, rng.choice(_REPLIES), None)]
                )
            rng.shuffle(exchanges)
            turns: list[dict[str, str]] = []
            for speaker, text, key in (t for ex in exchanges for t in ex):
                dia = f"D{s + 1}:{len(turns) + 1}"
                turns.append({"speaker": speaker, "dia_id": dia, "text": text})
                if key is not None:
                    ids[key] = dia
            data[f"session_{s + 1}"] = turns
            data[f"session_{s + 1}_date_time"] = _date(day, rng)
        data["qa"] = [
            {"question": q, "answer": ans, "evidence": [ids[k] for k in keys], "category": cat}
            for q, keys, cat, ans in c.qa
        ]  # fmt: skip
        out.append(data)
    return out


def _date(day: int, rng: random.Random) -> str:
    """A session date as LoCoMo writes it ("2:15 pm on 3 March, 2024"), ``day`` after 2023-01-01."""
    import datetime as dt

    d = dt.date(2023, 1, 1) + dt.timedelta(days=day)
    hour, minute = 9 + rng.randrange(12), rng.choice((0, 15, 30, 45))
    h12 = (hour - 1) % 12 + 1
    return f"{h12}:{minute:02d} {'am' if hour < 12 else 'pm'} on {d.day} {_MONTHS[d.month - 1]}, {d.year}"


def write_set(where: Path, seed: int = 0, conversations: int = 5) -> list[Path]:
    """Write the set as ``zh-<seed>-<n>.json`` files in ``where``; returns their paths."""
    where.mkdir(parents=True, exist_ok=True)
    paths = []
    for n, data in enumerate(generate(seed, conversations), 1):
        path = where / f"zh-{seed}-{n}.json"
        path.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        paths.append(path)
    return paths
